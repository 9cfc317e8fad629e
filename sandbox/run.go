package sandbox

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Stages of an Outcome.
const (
	StageInstall = "install" // the dependency install failed; the script did not run
	StageRun     = "run"
)

// Outcome is how one script ran in the sandbox.
type Outcome struct {
	Script   string
	Command  string // what ran: "npm run typecheck", or the install when it failed
	Stage    string
	ExitCode int // -1 when killed on timeout
	TimedOut bool
	Timeout  time.Duration
	Duration time.Duration // of the command (or the failed install)
	Output   Output
	Sync     SyncStats
	Install  Install
	// Refused says why the dependencies were not installed: one comes from
	// outside the registry. Stage is StageInstall; nothing ran.
	Refused string
	// OverLimit says how the command (or the install) went over a limit:
	// disk, or the memory or processes of its sandbox as a whole. An
	// install over its disk limit was stopped (ExitCode -1); a command that
	// filled its workspace had its writes past it refused (and Reset is
	// set); over the memory cap, the kernel killed a process.
	OverLimit string
	// Reset reports that the workspace was made anew from the project's
	// files: what the command wrote is gone.
	Reset bool
}

// Passed reports whether the script ran and exited 0 within its limits.
func (o Outcome) Passed() bool {
	return o.Stage == StageRun && o.ExitCode == 0 && !o.TimedOut && o.OverLimit == ""
}

// Summary is one line saying how the command ended.
func (o Outcome) Summary() string {
	d := o.Duration.Round(100 * time.Millisecond)
	switch {
	case o.Refused != "":
		return "the dependencies were not installed: " + o.Refused
	case o.OverLimit != "" && o.ExitCode == -1:
		return fmt.Sprintf("%s was stopped after %s: %s", o.Command, d, o.OverLimit)
	case o.OverLimit != "":
		return fmt.Sprintf("%s exited with code %d after %s: %s", o.Command, o.ExitCode, d, o.OverLimit)
	case o.TimedOut:
		return fmt.Sprintf("%s was killed after its %s timeout", o.Command, o.Timeout)
	case o.Stage == StageInstall:
		return fmt.Sprintf("the dependencies could not be installed: %s exited with code %d after %s", o.Command, o.ExitCode, d)
	case o.ExitCode == 0:
		return fmt.Sprintf("%s passed (exit code 0, %s)", o.Command, d)
	}
	return fmt.Sprintf("%s failed with exit code %d after %s", o.Command, o.ExitCode, d)
}

// scriptName is what Run accepts as a script: npm's own names, never an
// option.
var scriptName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9:._-]*$`)

// Run syncs the workspace, installs its dependencies if they are not
// cached, and runs `npm run <script>` in the sandbox with no network, for at
// most timeout (see Sandbox.Timeout). A script package.json lacks is a
// *ScriptError; a project without package.json is ErrNoPackageJSON. A
// script that fails, or is killed on timeout, is an Outcome, not an error.
func (w *Workspace) Run(ctx context.Context, script string, timeout time.Duration) (Outcome, error) {
	o := Outcome{Script: script, Command: "npm run " + script, Stage: StageRun, Timeout: w.sb.Timeout(timeout)}
	if !scriptName.MatchString(script) {
		return o, fmt.Errorf("run script %q: not a script name", script)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var err error
	if o.Sync, err = w.sync(ctx); err != nil {
		return o, err
	}
	// The host reads only what the project's files put in the workspace:
	// a command may have left anything beside them.
	if _, ok := w.synced["package.json"]; !ok {
		return o, ErrNoPackageJSON
	}
	pkg, err := w.readRegular("package.json")
	if err != nil {
		return o, err
	}
	lockName, lock := "", []byte(nil)
	for _, name := range lockfiles {
		if _, ok := w.synced[name]; ok {
			if lock, err = w.readRegular(name); err != nil {
				return o, err
			}
			lockName = name
			break
		}
	}
	scripts, err := parseScripts(pkg)
	if err != nil {
		return o, err
	}
	if _, ok := scripts[script]; !ok {
		var have []string
		for name := range scripts {
			have = append(have, name)
		}
		slices.Sort(have)
		return o, &ScriptError{Script: script, Have: have}
	}
	release, err := w.sb.acquire(ctx)
	if err != nil {
		return o, err
	}
	defer release()
	modules, inst, failed, done, err := w.sb.deps.ensure(ctx, w.projectID, pkg, lockName, lock)
	defer done()
	o.Install = inst
	var se *SourceError
	var me *ManifestError
	if errors.As(err, &se) || errors.As(err, &me) {
		o.Stage, o.Command, o.Refused, o.ExitCode = StageInstall, inst.Command, err.Error(), -1
		return o, nil
	}
	if err != nil {
		return o, err
	}
	if failed != nil {
		o.Stage, o.Command, o.Timeout = StageInstall, inst.Command, w.sb.cfg.InstallTimeout
		o.ExitCode, o.TimedOut, o.Duration, o.Output = failed.exitCode, failed.timedOut, failed.duration, failed.output
		o.OverLimit = joinLimits(failed.overQuota, failed.overMemory)
		return o, nil
	}
	out := &copyOut{dir: w.dir + ".next", maxBytes: w.sb.cfg.MaxWorkspaceBytes, maxEntries: maxQuotaEntries}
	defer func() { _ = removeAll(out.dir) }()
	res, err := w.sb.exec(ctx, spec{workspace: w.dir, workBytes: w.sb.cfg.MaxWorkspaceBytes, collect: out.collect,
		nodeModules: modules, argv: []string{"npm", "run", script}, timeout: o.Timeout})
	if err != nil {
		return o, err
	}
	o.ExitCode, o.TimedOut, o.Duration, o.Output, o.OverLimit = res.exitCode, res.timedOut, res.duration, res.output, res.overMemory
	switch {
	case res.timedOut:
		// Killed with its supervisor: the workspace stays as it was before.
		return o, nil
	case out.full:
		o.OverLimit = joinLimits(fmt.Sprintf("it filled the workspace (%d MiB): writes past it failed with no space left on device", w.sb.cfg.MaxWorkspaceBytes>>20), o.OverLimit)
	case res.collected != nil:
		o.OverLimit = joinLimits("what it left in the workspace could not be kept: "+res.collected.Error(), o.OverLimit)
	default:
		return o, w.replace(out.dir)
	}
	// What the command wrote does not stay: the next run starts from the
	// project's files.
	o.Reset = true
	return o, w.remove()
}

// joinLimits joins the ways a process went over its limits.
func joinLimits(why ...string) string {
	return strings.Join(slices.DeleteFunc(why, func(s string) bool { return s == "" }), "; ")
}
