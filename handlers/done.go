package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/internal/gate"
	"github.com/agentworker/agentworker/sandbox"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/changeset"
)

// defaultProjectChecks are the package.json scripts a build runs before it
// may finish, when the project has them.
var defaultProjectChecks = []string{"typecheck", "lint", "test"}

// maxNewLines bounds the new problem lines quoted in a refusal.
const maxNewLines = 40

// openWorkspace gives a build its sandbox workspace: the project as the
// build sees it (the store with the change set over it).
func (r *taskRun) openWorkspace() {
	if r.runner.deps.Sandbox == nil || r.cs == nil {
		return
	}
	files := buildFiles{cs: r.cs, base: r.runner.deps.Store}
	r.ws = r.runner.deps.Sandbox.Workspace(r.task.ID.String(), files, r.task.ProjectID.String())
}

// closeWorkspaces removes the build's workspaces when its attempt ends.
func (r *taskRun) closeWorkspaces(log *slog.Logger) {
	for _, ws := range []*sandbox.Workspace{r.ws, r.baseWS} {
		if ws == nil {
			continue
		}
		if err := ws.Close(); err != nil {
			log.Warn("remove workspace", slog.String("err", err.Error()))
		}
	}
}

// projectChecks is the definition of done beyond the static checks: the
// project's own check scripts (Config.ProjectChecks that package.json
// defines) must pass over the build's changes. A script that fails is run
// over the project as it was too: a failure that was there before the build
// is information, not a refusal, unless the build added lines to it. It
// returns the refusal for the model, or "".
func (r *taskRun) projectChecks(ctx context.Context) (string, error) {
	if r.ws == nil || len(r.runner.cfg.ProjectChecks) == 0 {
		return "", nil
	}
	entries, err := r.cs.Entries(ctx)
	if err != nil || len(entries) == 0 {
		return "", err // nothing changed: nothing to judge
	}
	scripts, err := r.ws.Scripts(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		// No package.json, or one the static checks report.
		return "", nil
	}
	var refusals []string
	for _, script := range r.runner.cfg.ProjectChecks {
		if _, ok := scripts[script]; !ok {
			continue
		}
		// What is queued (the static checks' log) is written while the
		// script runs rather than after it.
		r.rec.FlushAsync(ctx)
		out, err := gate.Wait(ctx, func() (sandbox.Outcome, error) { return r.ws.Run(ctx, script, r.runner.deps.Sandbox.MaxTimeout()) })
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			if _, err := r.rec.Emit(ctx, events.Log{Level: events.LevelWarn, Message: "project check " + script + " could not run: " + err.Error()}); err != nil {
				return "", err
			}
			continue
		}
		refusal, note, err := r.judge(ctx, script, out)
		if err != nil {
			return "", err
		}
		if _, err := r.rec.Emit(ctx, checkLog(out, note)); err != nil {
			return "", err
		}
		if refusal != "" {
			refusals = append(refusals, refusal)
		}
	}
	if len(refusals) == 0 {
		return "", nil
	}
	return "The project's own checks fail over your changes:\n" + strings.Join(refusals, "\n") +
		"\nFix these problems (run_command runs a check again), then call finish again.", nil
}

// judge decides whether a check's outcome refuses the finish, comparing a
// failure with the same script over the project as it was.
func (r *taskRun) judge(ctx context.Context, script string, out sandbox.Outcome) (refusal, note string, err error) {
	if out.Passed() {
		return "", "", nil
	}
	before, ran, err := r.baseline(ctx, script)
	if err != nil {
		return "", "", err
	}
	if !ran || before.Passed() {
		return fmt.Sprintf("%s:\n%s", out.Summary(), out.Output.ForModel()), "", nil
	}
	added := sandbox.NewLines(before.Output.Full(), out.Output.Full())
	if len(added) == 0 {
		return "", "it failed the same way before this build", nil
	}
	more := ""
	if len(added) > maxNewLines {
		more = fmt.Sprintf("\n(and %d more)", len(added)-maxNewLines)
		added = added[:maxNewLines]
	}
	return fmt.Sprintf("%s; it failed before this build too, and these lines are new:\n%s%s\n", out.Summary(), strings.Join(added, "\n"), more),
		"it failed before this build too; the build added problems", nil
}

// baseline runs a script over the project without the build's changes,
// once per attempt. ran is false when the project had no such script.
func (r *taskRun) baseline(ctx context.Context, script string) (out sandbox.Outcome, ran bool, err error) {
	if out, ok := r.baseRuns[script]; ok {
		return out, true, nil
	}
	if r.baseWS == nil {
		r.baseWS = r.runner.deps.Sandbox.Workspace(r.task.ID.String()+"-base", r.runner.deps.Store, r.task.ProjectID.String())
	}
	out, err = gate.Wait(ctx, func() (sandbox.Outcome, error) { return r.baseWS.Run(ctx, script, r.runner.deps.Sandbox.MaxTimeout()) })
	var se *sandbox.ScriptError
	switch {
	case errors.As(err, &se), errors.Is(err, sandbox.ErrNoPackageJSON):
		return out, false, nil
	case err != nil:
		return out, false, err
	}
	if r.baseRuns == nil {
		r.baseRuns = map[string]sandbox.Outcome{}
	}
	r.baseRuns[script] = out
	return out, true, nil
}

func checkLog(out sandbox.Outcome, note string) events.Log {
	level, msg := events.LevelInfo, "project check: "+out.Summary()
	if !out.Passed() {
		level = events.LevelWarn
	}
	if note != "" {
		msg += "; " + note
	}
	return events.Log{Level: level, Message: msg, Metadata: map[string]any{
		"script": out.Command, "exitCode": out.ExitCode, "durationMs": out.Duration.Milliseconds(), "timedOut": out.TimedOut,
		"output": out.Output.ForModel(), "outputBytes": out.Output.Bytes}}
}

// buildFiles is the project as a build's workspace is made from: the change
// set's listing and staged contents, the other files read from the store
// directly, so the workspace's reads do not count as the agent's reads (the
// versions its writes are checked against).
type buildFiles struct {
	cs   *changeset.Set
	base storage.Store
}

func (f buildFiles) List(ctx context.Context, projectID, dir string) ([]storage.FileInfo, error) {
	return f.cs.List(ctx, projectID, dir)
}

func (f buildFiles) Read(ctx context.Context, projectID, p string) ([]byte, storage.FileInfo, error) {
	entries, err := f.cs.Entries(ctx)
	if err != nil {
		return nil, storage.FileInfo{}, err
	}
	if slices.ContainsFunc(entries, func(e agentsql.ChangeEntry) bool { return e.Path == p }) {
		return f.cs.Read(ctx, projectID, p)
	}
	return f.base.Read(ctx, projectID, p)
}
