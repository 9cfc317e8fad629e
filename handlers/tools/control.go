package tools

import (
	"context"
	"encoding/json"
	"strings"
)

func finishTool() Tool {
	return Tool{
		Name:        "finish",
		Description: "Call when the task is complete, with a summary of what was done (files changed and why).",
		Parameters:  schema([]string{"summary"}, map[string]any{"summary": str("What was done, for the user.")}),
		Access:      Control,
		Run: func(_ context.Context, _ Env, raw json.RawMessage) Result {
			var args struct {
				Summary string `json:"summary"`
			}
			if r := decode("finish", raw, &args); r != nil {
				return *r
			}
			if strings.TrimSpace(args.Summary) == "" {
				return Fail("finish: summary is empty", "say what was done")
			}
			r := OK("finished", nil)
			r.Finished = true
			r.Summary = args.Summary
			return r
		},
	}
}
