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

func requestInputTool() Tool {
	return Tool{
		Name: "request_input",
		Description: "Ask the user a question when you cannot go on without their decision or information " +
			"(not for anything the project's files can tell you). The task waits until they answer; " +
			"the answer comes back as this call's result.",
		Parameters: schema([]string{"question"}, map[string]any{"question": str("The question, self-contained: the user sees it in their inbox.")}),
		Access:     Ask,
		Run: func(_ context.Context, _ Env, raw json.RawMessage) Result {
			var args struct {
				Question string `json:"question"`
			}
			if r := decode("request_input", raw, &args); r != nil {
				return *r
			}
			q := strings.TrimSpace(args.Question)
			if q == "" {
				return Fail("request_input: question is empty", "say what you need to know")
			}
			r := OK("asked: "+clip(q, 120), nil)
			r.Question = q
			return r
		},
	}
}
