package tools_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentworker/agentworker/testing/s3test"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, s3test.LeakOption())
}
