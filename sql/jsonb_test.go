package sql_test

import (
	"testing"

	agentsql "github.com/agentworker/agentworker/sql"
)

func TestJSONB(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{`{"a":"x"}`, `{"a":"x"}`},
		{`{"a":"x\u0000y"}`, `{"a":"x\ufffdy"}`},
		{`{"a":"\\u0000"}`, `{"a":"\\u0000"}`},
		{`{"a":"\\\u0000"}`, `{"a":"\\\ufffd"}`},
		{`["\u00001","\u0001"]`, `["\ufffd1","\u0001"]`},
	} {
		if got := string(agentsql.JSONB([]byte(c.in))); got != c.want {
			t.Errorf("JSONB(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}
