package tools_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/handlers/tools"
)

func TestParseCallPolicyRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, policy, want string
	}{
		{"NotAList", `{"tool": "write_file"}`, "must be a list"},
		{"UnknownField", `[{"tool": "write_file", "action": "ask", "when": "always"}]`, "unknown field"},
		{"UnknownTool", `[{"tool": "rm_rf", "action": "deny"}]`, `tool "rm_rf" is not a tool`},
		{"UnknownAction", `[{"tool": "write_file", "action": "maybe"}]`, `action "maybe"`},
		{"MissingAction", `[{"tool": "write_file"}]`, `action ""`},
		{"BadGlob", `[{"tool": "write_file", "match": "src/[a", "action": "ask"}]`, "not a valid path glob"},

		{"BadCommandPattern", `[{"tool": "run_command", "match": "npm_[", "action": "ask"}]`, "not a valid command pattern"},
		{"BadGlobOnSearch", `[{"tool": "search_files", "match": "[", "action": "deny"}]`, "not a valid path glob"},
		{"LoopControl", `[{"tool": "finish", "action": "deny"}]`, "steers the loop"},
		{"LongReason", `[{"tool": "write_file", "action": "deny", "reason": "` + strings.Repeat("x", 501) + `"}]`, "reason is 501 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := tools.ParseCallPolicy(json.RawMessage(c.policy))
			var pe *tools.PolicyError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ParseCallPolicy(%s) = %v, want a *PolicyError with %q", c.policy, err, c.want)
			}
		})
	}
}

func TestCallPolicyDecide(t *testing.T) {
	t.Parallel()
	policy, err := tools.ParseCallPolicy(json.RawMessage(`[
		{"tool": "write_file", "match": "docs/**", "action": "allow"},
		{"tool": "*", "match": "**/*.env", "action": "deny", "reason": "secrets"},
		{"tool": "write_file", "action": "ask", "reason": "writes need a look"},
		{"tool": "run_command", "match": "npm_t*", "action": "ask"},
		{"tool": "delete_file", "action": "deny", "reason": "no deletes"}
	]`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, tool, args, want, reason string
	}{
		{"FirstRuleWins", "write_file", `{"path": "docs/a.md"}`, "allow", ""},
		{"GlobAcrossFolders", "read_file", `{"path": "config/prod/app.env"}`, "deny", "secrets"},
		{"ToolRuleWithoutMatch", "write_file", `{"path": "src/a.go"}`, "ask", "writes need a look"},
		{"PathCleaned", "write_file", `{"path": "./docs/../src/a.go"}`, "ask", "writes need a look"},
		{"NoRuleAllows", "read_file", `{"path": "src/a.go"}`, "allow", ""},
		{"CommandByName", "run_command", `{"command": "npm_test"}`, "ask", ""},
		{"OtherCommand", "run_command", `{"command": "npm_lint"}`, "allow", ""},
		{"MoveStrictestOfBothPaths", "move_file", `{"fromPath": "a.txt", "toPath": "b.env"}`, "deny", "secrets"},
		{"PatchPaths", "apply_patch", `{"patch": "*** Begin Patch\n*** Add File: x/.env\n+A=1\n*** End Patch"}`, "deny", "secrets"},
		{"DenyWithoutMatch", "delete_file", `{"path": "docs/a.md"}`, "deny", "no deletes"},
		{"UndecodableArgs", "finish", `not json`, "allow", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := policy.Decide(c.tool, c.args)
			if d.Action != c.want || d.Reason != c.reason {
				t.Fatalf("Decide(%s, %s) = %+v, want %s (%q)", c.tool, c.args, d, c.want, c.reason)
			}
		})
	}
}

func TestStricterNarrows(t *testing.T) {
	t.Parallel()
	allow, ask, deny := tools.Decision{Action: "allow"}, tools.Decision{Action: "ask"}, tools.Decision{Action: "deny", Reason: "r"}
	for _, c := range []struct{ a, b, want tools.Decision }{
		{allow, ask, ask}, {ask, allow, ask}, {ask, deny, deny}, {deny, allow, deny}, {allow, allow, allow},
	} {
		if got := tools.Stricter(c.a, c.b); got != c.want {
			t.Errorf("Stricter(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
