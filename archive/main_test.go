package archive_test

import (
	"testing"

	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/s3test"
)

func TestMain(m *testing.M) {
	dbtest.Main(m, s3test.LeakOption())
}
