// Package tools holds the agent's tools and the registry that decides which
// of them a task may use: chat and plan tasks get the read-only set, build
// tasks the full set. The check is made when a call is executed, not only
// when tools are offered, so a model that names a write tool it was never
// offered is still refused.
package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/sandbox"
	"github.com/agentworker/agentworker/storage"
)

// Access says what a tool may do to the project.
type Access int

// Tool access levels.
const (
	ReadOnly Access = iota // never changes the project
	Write                  // changes the project's files
	Control                // steers the loop (finish)
	// Ask puts a question to the user (request_input); every task type may.
	Ask
	// Execute runs the project's own commands in a sandbox (run_command);
	// build tasks only.
	Execute
)

// Env is what a tool call runs against.
type Env struct {
	// Store holds the project's files. For a build task it is the build's
	// change set (storage/changeset): writes, deletes and moves are staged
	// and land in the project only when the build succeeds; reads, stats
	// and listings see the staged changes over the project's files. Either
	// way it keeps the storage.Store contract (package storagetest), so a
	// tool need not know which it was given.
	Store storage.Store
	// ProjectID is the project the task works on; a change set refuses any
	// other.
	ProjectID string
	// Cache, when set, keeps file contents by version between the calls of
	// one task, so that repeated searches do not read unchanged files again.
	Cache *Cache
	// Images generates pictures for generate_image. Without it the tool
	// fails with an error the model can act on.
	Images ImageGenerator
	// Scope, when set, confines writes, deletes and moves to the task's
	// allowed_paths.
	Scope *storage.Scope
	// Reserved are paths the service writes itself (the project's tasks.md):
	// a tool may read them but never write, delete or move onto them.
	Reserved []string
	// MaxReadBytes and MaxWriteBytes cap the size of a file read or
	// written. Default to storage.DefaultMaxReadBytes and DefaultMaxWriteBytes.
	MaxReadBytes, MaxWriteBytes int64
	// Workspace is where run_command runs the project's scripts: the
	// project as the task sees it, in a sandbox. Nil when commands are off.
	Workspace *sandbox.Workspace
}

// Result is the outcome of one tool call. Output is what the model reads
// next; on failure it is a JSON error object the model can act on.
type Result struct {
	Success bool
	Output  string
	// Summary is a one-line description for the timeline.
	Summary string
	// Changes lists the file changes the call made, for file_update events.
	Changes []events.FileUpdate
	// Finished is set by the finish tool; Summary then holds the final summary.
	Finished bool
	// FromPath and ToPath are set by move_file, for its tool_call event.
	FromPath, ToPath string
	// Question is set by request_input: the loop stops and waits for the
	// user's answer, which becomes this call's result.
	Question string
	// Full, when set, is the uncut output for the timeline's tool_complete
	// event; Output was cut to spare the model's context.
	Full string
	// Command and ExitCode are set by run_command, for its tool_call event.
	Command  string
	ExitCode *int
	// Logs are log events to write with the call's tool_call event.
	Logs []events.Log
	// Err is a failure that is not the model's to act on: the store could
	// not be reached for as long as it retries (storage.ErrUnavailable),
	// whether or not the tool passed it on. The loop ends the attempt with
	// it, and the task is retried, instead of showing it to the model.
	Err error
}

// Tool is one callable tool.
type Tool struct {
	Name        string
	Description string
	Parameters  map[string]any
	Access      Access
	Run         func(ctx context.Context, env Env, args json.RawMessage) Result

	// definition is what the model is offered, encoded once (see catalog).
	definition llm.Tool
}

// Registry is the set of tools one task may use.
type Registry struct {
	allowed  map[string]Tool
	catalog  map[string]Tool
	taskType string
}

// ForTaskType returns the registry of a task type: chat and plan tasks get
// the read-only tools and request_input, build tasks every tool (run_command
// among them).
func ForTaskType(taskType string) (*Registry, error) {
	all, err := encodedCatalog()
	if err != nil {
		return nil, fmt.Errorf("tool registry for task type %q: %w", taskType, err)
	}
	r := &Registry{allowed: map[string]Tool{}, catalog: map[string]Tool{}, taskType: taskType}
	for _, t := range all {
		r.catalog[t.Name] = t
	}
	switch taskType {
	case "chat", "plan":
		for _, t := range all {
			if t.Access == ReadOnly || t.Access == Ask {
				r.allowed[t.Name] = t
			}
		}
	case "build":
		for _, t := range all {
			r.allowed[t.Name] = t
		}
	default:
		return nil, fmt.Errorf("tool registry for task type %q: unknown type (want chat, plan or build)", taskType)
	}
	return r, nil
}

// Without returns a copy of the registry without the named tools, for a
// worker that cannot run them (run_command with RUN_COMMAND off): they are
// neither offered nor known.
func (r *Registry) Without(names ...string) *Registry {
	out := &Registry{allowed: maps.Clone(r.allowed), catalog: maps.Clone(r.catalog), taskType: r.taskType}
	for _, n := range names {
		delete(out.allowed, n)
		delete(out.catalog, n)
	}
	return out
}

// Only returns a copy of the registry narrowed to the named tools (an
// agent's): a name the registry does not allow stays out, so a list never
// widens what the task type may do. The control tools (finish) stay: they
// steer the loop, never the project.
func (r *Registry) Only(names []string) *Registry {
	out := &Registry{allowed: map[string]Tool{}, catalog: maps.Clone(r.catalog), taskType: r.taskType}
	for name, t := range r.allowed {
		if t.Access == Control || slices.Contains(names, name) {
			out.allowed[name] = t
		}
	}
	return out
}

// Names returns the allowed tool names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.allowed))
	for n := range r.allowed {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Definitions returns the tools to offer the model, sorted by name.
func (r *Registry) Definitions() []llm.Tool {
	var defs []llm.Tool
	for _, n := range r.Names() {
		defs = append(defs, r.allowed[n].definition)
	}
	return defs
}

// Writes reports whether the named tool changes the project.
func (r *Registry) Writes(name string) bool {
	t, ok := r.catalog[name]
	return ok && t.Access == Write
}

// Has reports whether the registry allows the named tool.
func (r *Registry) Has(name string) bool {
	_, ok := r.allowed[name]
	return ok
}

// Call runs one tool call. Unknown tools, tools the task type may not use
// and malformed arguments come back as failed Results, never as a panic or
// an error that would end the loop.
func (r *Registry) Call(ctx context.Context, env Env, name, arguments string) Result {
	t, ok := r.allowed[name]
	if !ok {
		if _, known := r.catalog[name]; known {
			return Fail(fmt.Sprintf("tool %s is not allowed for %s tasks: they may only read the project", name, r.taskType),
				"allowed tools: "+strings.Join(r.Names(), ", "))
		}
		return Fail(fmt.Sprintf("unknown tool %q", name), "allowed tools: "+strings.Join(r.Names(), ", "))
	}
	args := json.RawMessage(arguments)
	if strings.TrimSpace(arguments) == "" {
		args = json.RawMessage(`{}`)
	}
	if !json.Valid(args) {
		return Fail(fmt.Sprintf("arguments of %s are not valid JSON: %s", name, clip(arguments, 200)),
			"send the arguments as one JSON object matching the tool's parameters")
	}
	if err := ctx.Err(); err != nil {
		return Fail(fmt.Sprintf("%s not run: %v", name, err), "")
	}
	var out outage
	if env.Store != nil {
		env.Store = guard(env, &out)
	}
	res := t.Run(ctx, env, args)
	if err := out.err(); err != nil {
		return Result{Err: fmt.Errorf("%s: %w", name, err)}
	}
	return res
}

// Fail builds a failed Result whose Output is a JSON error for the model.
func Fail(message, hint string) Result {
	body := map[string]any{"success": false, "error": message}
	if hint != "" {
		body["hint"] = hint
	}
	out, _ := json.Marshal(body)
	return Result{Success: false, Output: string(out), Summary: message}
}

// FailWith is Fail with extra fields in the error object.
func FailWith(message, hint string, extra map[string]any) Result {
	body := map[string]any{"success": false, "error": message}
	for k, v := range extra {
		body[k] = v
	}
	if hint != "" {
		body["hint"] = hint
	}
	out, _ := json.Marshal(body)
	return Result{Success: false, Output: string(out), Summary: message}
}

// OK builds a successful Result whose Output is the JSON encoding of body.
func OK(summary string, body map[string]any) Result {
	if body == nil {
		body = map[string]any{}
	}
	body["success"] = true
	out, err := json.Marshal(body)
	if err != nil {
		return Fail("encode tool result: "+err.Error(), "")
	}
	return Result{Success: true, Output: string(out), Summary: summary}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// decode unmarshals tool arguments strictly: unknown fields are an error the
// model can fix.
func decode(name string, args json.RawMessage, v any) *Result {
	dec := json.NewDecoder(strings.NewReader(string(args)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		r := Fail(fmt.Sprintf("invalid arguments for %s: %v", name, err), "check the parameter names and types")
		return &r
	}
	return nil
}
