package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/sandbox"
)

// RunCommand is the name of the tool that runs the project's own checks.
const RunCommand = "run_command"

// commands are the only commands run_command runs: each is an npm script
// of the project's package.json.
var commands = map[string]string{
	"npm_lint":      "lint",
	"npm_typecheck": "typecheck",
	"npm_test":      "test",
	"npm_build":     "build",
}

func runCommandTool() Tool {
	names := slices.Sorted(maps.Keys(commands))
	return Tool{
		Name: RunCommand,
		Description: "Run one of the project's own checks over the project as you have changed it, and read what it reports: " +
			"npm_lint, npm_typecheck, npm_test and npm_build run `npm run lint|typecheck|test|build` (when package.json has that script) " +
			"in a sandbox without network. Use it to verify your changes; fix what it reports, then run it again.",
		Parameters: schema([]string{"command"}, map[string]any{
			"command": map[string]any{"type": "string", "enum": names, "description": "The command to run."},
			"timeout": map[string]any{"type": "number", "description": "Timeout in milliseconds (default 30000)."},
		}),
		Access: Execute,
		Run: func(ctx context.Context, env Env, raw json.RawMessage) Result {
			var args struct {
				Command string  `json:"command"`
				Timeout float64 `json:"timeout"`
			}
			if r := decode(RunCommand, raw, &args); r != nil {
				return *r
			}
			script, ok := commands[args.Command]
			if !ok {
				return Fail(fmt.Sprintf("run_command: unknown command %q", args.Command), "use one of: "+strings.Join(names, ", "))
			}
			if env.Workspace == nil {
				return Fail("run_command: commands cannot run on this worker (RUN_COMMAND is off)", "check your changes by reading them instead")
			}
			out, err := env.Workspace.Run(ctx, script, time.Duration(args.Timeout*float64(time.Millisecond)))
			return commandResult(args.Command, out, err)
		},
	}
}

// commandResult tells the model how the command ended: a command that ran
// to its end is a successful call whatever its exit code (the model reads
// the code and the output); one that could not run, or was killed on
// timeout, is a failed call.
func commandResult(name string, out sandbox.Outcome, err error) Result {
	var se *sandbox.ScriptError
	switch {
	case errors.As(err, &se):
		return FailWith("run_command: "+se.Error(), "run only the checks the project has", map[string]any{"scripts": se.Have})
	case errors.Is(err, sandbox.ErrNoPackageJSON):
		return Fail("run_command: "+err.Error()+": there is nothing to run", "")
	case err != nil:
		return Fail("run_command: "+name+" could not run: "+err.Error(), "")
	}
	body := func(output string) map[string]any {
		b := map[string]any{"command": name, "script": out.Command, "exitCode": out.ExitCode, "passed": out.Passed(),
			"durationMs": out.Duration.Milliseconds(), "output": output, "outputBytes": out.Output.Bytes}
		if out.Sync.Written > 0 || out.Sync.Removed > 0 {
			b["workspace"] = out.Sync
		}
		return b
	}
	summary := out.Summary()
	var r Result
	switch {
	case out.Refused != "":
		r = FailWith("run_command: "+summary, "depend on packages of the npm registry by version or range (e.g. \"^1.2.0\"); git repositories, local paths and tarball URLs are never installed", body(out.Refused))
	case out.Reset && out.Stage == sandbox.StageRun:
		r = FailWith("run_command: "+summary, "write less in the project's directory (build output, caches, logs); it was reset to the project's files", body(out.Output.ForModel()))
	case out.OverLimit != "" && out.Stage == sandbox.StageRun:
		r = FailWith("run_command: "+summary, "use less memory, or fewer processes and threads at once: the cap holds for all of them together", body(out.Output.ForModel()))
	case out.Stage == sandbox.StageInstall:
		r = FailWith("run_command: "+summary, "fix the dependencies in package.json (names, versions) and the lockfile", body(out.Output.ForModel()))
	case out.TimedOut:
		r = FailWith("run_command: "+summary, "pass a longer timeout, or make the script finish sooner", body(out.Output.ForModel()))
	default:
		r = OK(summary, body(out.Output.ForModel()))
	}
	if out.Output.Cut(sandbox.ModelHeadBytes, sandbox.ModelTailBytes) {
		full := body(out.Output.Full())
		full["success"] = r.Success
		if b, err := json.Marshal(full); err == nil {
			r.Full = string(b)
		}
	}
	r.Command = out.Command
	if out.Refused == "" {
		exit := out.ExitCode
		r.ExitCode = &exit
	}
	level := events.LevelInfo
	if !out.Passed() {
		level = events.LevelWarn
	}
	r.Logs = []events.Log{{Level: level, Message: "run_command: " + summary, Metadata: map[string]any{
		"command": name, "script": out.Command, "exitCode": out.ExitCode, "durationMs": out.Duration.Milliseconds(),
		"timedOut": out.TimedOut, "output": out.Output.ForModel(), "outputBytes": out.Output.Bytes}}}
	return r
}
