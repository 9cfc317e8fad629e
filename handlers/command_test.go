package handlers_test

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/sandbox"
	"github.com/agentworker/agentworker/testing/sandboxtest"
)

// setupSandbox is setup with a real sandbox and the TypeScript fixture
// (plus files) as the project.
func setupSandbox(t *testing.T, replies []scripted.Reply, cfg handlers.Config, files map[string]string) *harness {
	t.Helper()
	sb := sandboxtest.New(t, sandbox.Config{})
	all := sandboxtest.Fixture()
	maps.Copy(all, files)
	return setupWith(t, handlers.Deps{Sandbox: sb}, replies, cfg, all)
}

// toolOutput returns what the model read as the result of its last call,
// in the request it made after it.
func toolOutput(t *testing.T, h *harness, request int) map[string]any {
	t.Helper()
	msgs := h.llm.Requests()[request].Messages
	var out map[string]any
	if err := json.Unmarshal([]byte(msgs[len(msgs)-1].Content), &out); err != nil {
		t.Fatalf("tool output of request %d: %v", request, err)
	}
	return out
}

// decoded returns the payloads of the events of one type.
func decoded[P any](t *testing.T, evs []events.Event, typ events.Type) []P {
	t.Helper()
	var out []P
	for _, ev := range evs {
		if ev.Type != typ {
			continue
		}
		var p P
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func commandCalls(t *testing.T, evs []events.Event) []events.ToolCall {
	t.Helper()
	var calls []events.ToolCall
	for _, tc := range decoded[events.ToolCall](t, evs, events.TypeToolCall) {
		if tc.ToolName == "run_command" {
			calls = append(calls, tc)
		}
	}
	return calls
}

// The fixture's src/index.ts with a type error, and its fix.
var (
	introduceTypeError = call("write_file", m{"path": "src/index.ts",
		"content": "import { greet } from './greet'\n\nconst message: number = greet('world')\nconsole.log(message)\n"})
	fixTypeError = call("edit_file", m{"path": "src/index.ts", "old_string": "const message: number", "new_string": "const message: string"})
)

// logEvents returns the log events whose message contains s.
func logEvents(t *testing.T, evs []events.Event, s string) []events.Log {
	t.Helper()
	var logs []events.Log
	for _, l := range decoded[events.Log](t, evs, events.TypeLog) {
		if strings.Contains(l.Message, s) {
			logs = append(logs, l)
		}
	}
	return logs
}

func TestTypeErrorToldByTypecheckThenFixed(t *testing.T) {
	t.Parallel()
	h := setupSandbox(t, []scripted.Reply{
		introduceTypeError,
		call("run_command", m{"command": "npm_typecheck"}),
		fixTypeError,
		call("run_command", m{"command": "npm_typecheck", "timeout": 120000}),
		call("finish", m{"summary": "index.ts logs the greeting as a string; typecheck passes."}),
	}, handlers.Config{}, nil)
	id := h.insert(t, "build", "log the greeting", nil)
	evs, task := h.wait(t, id)
	result(t, task)

	failed := toolOutput(t, h, 2)
	if failed["passed"] != false || failed["exitCode"] != float64(2) ||
		!strings.Contains(failed["output"].(string), "src/index.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.") {
		t.Fatalf("first typecheck as the model read it: %v", failed)
	}
	if passed := toolOutput(t, h, 4); passed["passed"] != true || passed["exitCode"] != float64(0) {
		t.Fatalf("second typecheck: %v", passed)
	}
	calls := commandCalls(t, evs)
	if len(calls) != 2 || calls[0].Command != "npm run typecheck" || calls[0].ArgsSummary != "npm_typecheck" ||
		*calls[0].ExitCode != 2 || *calls[1].ExitCode != 0 || calls[0].Success || !calls[1].Success || calls[0].Duration <= 0 {
		t.Fatalf("run_command events: %+v", calls)
	}
	logs := logEvents(t, evs, "npm run typecheck")
	// Two calls, then the definition of done at finish.
	if len(logs) != 3 || !strings.HasPrefix(logs[2].Message, "project check: npm run typecheck passed") {
		t.Errorf("log events: %+v", logs)
	}
	for _, l := range logs {
		if l.Metadata["output"] == nil {
			t.Errorf("log %q carries no output", l.Message)
		}
	}
	if got := h.files(t)["src/index.ts"]; !strings.Contains(got, "const message: string") {
		t.Errorf("src/index.ts = %q", got)
	}
}

// TestFinishRefusedUntilTypecheckPasses: the model never runs the check;
// the build runs it before finish and feeds the failure back as FIX.
func TestFinishRefusedUntilTypecheckPasses(t *testing.T) {
	t.Parallel()
	h := setupSandbox(t, []scripted.Reply{
		introduceTypeError,
		call("finish", m{"summary": "done"}),
		fixTypeError,
		call("finish", m{"summary": "index.ts logs the greeting; typecheck passes."}),
	}, handlers.Config{}, nil)
	id := h.insert(t, "build", "log the greeting", nil)
	_, task := h.wait(t, id)
	result(t, task)
	refusal := toolOutput(t, h, 2)
	hint, _ := refusal["hint"].(string)
	if refusal["success"] != false || !strings.HasPrefix(hint, "The project's own checks fail over your changes:\nnpm run typecheck failed with exit code 2") ||
		!strings.Contains(hint, "error TS2322") || !strings.Contains(hint, "call finish again") {
		t.Fatalf("finish refusal: %v", refusal)
	}
}

// TestCheckFailingBeforeTheBuildDoesNotRefuse: a typecheck that failed
// before the build, the same way, is information, not a refusal.
func TestCheckFailingBeforeTheBuildDoesNotRefuse(t *testing.T) {
	t.Parallel()
	h := setupSandbox(t, []scripted.Reply{
		call("write_file", m{"path": "src/farewell.ts", "content": "export function farewell(name: string): string {\n  return `Bye, ${name}!`\n}\n"}),
		call("finish", m{"summary": "added farewell()"}),
	}, handlers.Config{}, map[string]string{"src/legacy.ts": "export const port: number = '8080'\n"})
	id := h.insert(t, "build", "add farewell", nil)
	evs, task := h.wait(t, id)
	result(t, task)
	if len(logEvents(t, evs, "it failed the same way before this build")) != 1 {
		t.Error("no log event says the check failed before the build")
	}
	if _, ok := h.files(t)["src/farewell.ts"]; !ok {
		t.Error("the change was not applied")
	}
}

// TestWorkspaceIsThePendingChangeSet: a command sees the build's staged
// writes and deletes, which the project does not have yet.
func TestWorkspaceIsThePendingChangeSet(t *testing.T) {
	t.Parallel()
	pkg := `{"name": "ts-fixture", "version": "1.0.0", "private": true,
  "scripts": {"build": "cat src/new.ts && ls"},
  "devDependencies": {"typescript": "5.9.3"}}`
	h := setupSandbox(t, []scripted.Reply{
		call("write_file", m{"path": "src/new.ts", "content": "export const staged = 'yes'\n"}),
		call("delete_file", m{"path": "NOTES.md"}),
		call("run_command", m{"command": "npm_build"}),
		call("finish", m{"summary": "checked"}),
	}, handlers.Config{ProjectChecks: []string{}}, map[string]string{"package.json": pkg, "NOTES.md": "notes\n"})
	id := h.insert(t, "build", "stage things", nil)
	_, task := h.wait(t, id)
	result(t, task)
	out := toolOutput(t, h, 3)["output"].(string)
	if !strings.Contains(out, "export const staged = 'yes'") || strings.Contains(out, "NOTES.md") || !strings.Contains(out, "tsconfig.json") {
		t.Fatalf("the command saw:\n%s", out)
	}
}

func TestChatTaskCannotRunCommands(t *testing.T) {
	t.Parallel()
	h := setupSandbox(t, []scripted.Reply{
		call("run_command", m{"command": "npm_typecheck"}),
		{Content: "I cannot run commands."},
	}, handlers.Config{}, nil)
	id := h.insert(t, "chat", "does it typecheck?", nil)
	_, task := h.wait(t, id)
	result(t, task)
	out := toolOutput(t, h, 1)
	if out["success"] != false || !strings.Contains(out["error"].(string), "tool run_command is not allowed for chat tasks") {
		t.Fatalf("chat's run_command: %v", out)
	}
	if req := h.llm.Requests()[0]; req.HasTool("run_command") {
		t.Fatal("run_command was offered to a chat task")
	}
}
