package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers/prompts"
	"github.com/agentworker/agentworker/llm"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
)

// Plan step actions.
const (
	ActionCreate = "create_file"
	ActionUpdate = "update_file"
	ActionDelete = "delete_file"
	ActionMove   = "move_file"
)

// Plan is the structured output of a plan task: steps in dependency order,
// described in words — never code: the build stage writes the code.
type Plan struct {
	Summary string     `json:"summary"`
	Steps   []PlanStep `json:"steps"`
	// Tasks are the tasks a plan with input.expand planned: they become its
	// children, ordered by their dependencies, when it succeeds.
	Tasks []PlanTask `json:"tasks,omitempty"`
}

// PlanTask is one task of an expanding plan.
type PlanTask struct {
	Key       string   `json:"key"`
	Title     string   `json:"title"`
	Prompt    string   `json:"prompt"`
	Type      string   `json:"type"`
	Agent     string   `json:"agent"` // an agent of the project by name, or empty
	Priority  int      `json:"priority"`
	DependsOn []string `json:"dependsOn"` // keys of other tasks of the plan
}

// maxPlannedTasks bounds the tasks one plan may create.
const maxPlannedTasks = 50

// PlanStep is one step of a Plan; a build executes it as one decision.
type PlanStep struct {
	ID                  string `json:"id"`
	Action              string `json:"action"`
	Path                string `json:"path"`
	ToPath              string `json:"toPath"`
	Description         string `json:"description"`
	NeedsCodeGeneration bool   `json:"needsCodeGeneration"`
}

// Text renders the plan for a build's system prompt.
func (p *Plan) Text() string {
	var b strings.Builder
	b.WriteString(p.Summary + "\n")
	for i, s := range p.Steps {
		target := s.Path
		if s.ToPath != "" {
			target += " → " + s.ToPath
		}
		fmt.Fprintf(&b, "%d. [%s] %s %s: %s\n", i+1, s.ID, s.Action, target, s.Description)
	}
	return strings.TrimRight(b.String(), "\n")
}

// planSchema is the JSON Schema of a Plan, strict: every property required,
// nothing else allowed (so there is no place for code). An expanding plan
// has tasks too.
func planSchema(expand bool) map[string]any {
	str := func(d string) map[string]any { return map[string]any{"type": "string", "description": d} }
	step := map[string]any{
		"type": "object", "additionalProperties": false,
		"required": []string{"id", "action", "path", "toPath", "description", "needsCodeGeneration"},
		"properties": map[string]any{
			"id":                  str("A short unique id, e.g. step-1."),
			"action":              map[string]any{"type": "string", "enum": []string{ActionCreate, ActionUpdate, ActionDelete, ActionMove}},
			"path":                str("The file, relative to the project root."),
			"toPath":              str("The target of a move_file; empty otherwise."),
			"description":         str("What the file must do or what changes, in words. No code."),
			"needsCodeGeneration": map[string]any{"type": "boolean", "description": "True when code must be written for this step."},
		},
	}
	schema := map[string]any{
		"type": "object", "additionalProperties": false, "required": []string{"summary", "steps"},
		"properties": map[string]any{
			"summary": str("The goal and approach in one or two sentences."),
			"steps":   map[string]any{"type": "array", "items": step},
		},
	}
	if expand {
		task := map[string]any{
			"type": "object", "additionalProperties": false,
			"required": []string{"key", "title", "prompt", "type", "agent", "priority", "dependsOn"},
			"properties": map[string]any{
				"key":       str("A short unique key, e.g. t1, that other tasks name in dependsOn."),
				"title":     str("The task in a few words."),
				"prompt":    str("What the task's agent must do, as a person would ask it."),
				"type":      map[string]any{"type": "string", "enum": []string{"chat", "plan", "build"}},
				"agent":     str("The name of one of the project's agents to do it, or empty."),
				"priority":  map[string]any{"type": "integer", "description": "1 (most urgent) to 4."},
				"dependsOn": map[string]any{"type": "array", "items": str("The key of a task that must succeed first.")},
			},
		}
		schema["required"] = []string{"summary", "steps", "tasks"}
		schema["properties"].(map[string]any)["tasks"] = map[string]any{"type": "array", "items": task}
	}
	return schema
}

// validate checks a plan from the model: known actions, jailed paths,
// unique ids (missing ids are assigned).
func (p *Plan) validate() error {
	if len(p.Steps) == 0 && len(p.Tasks) == 0 {
		return errors.New("the plan has no steps")
	}
	seen := map[string]bool{}
	for i := range p.Steps {
		s := &p.Steps[i]
		if s.ID == "" {
			s.ID = fmt.Sprintf("step-%d", i+1)
		}
		if seen[s.ID] {
			return fmt.Errorf("step %d: id %q is used twice", i+1, s.ID)
		}
		seen[s.ID] = true
		switch s.Action {
		case ActionCreate, ActionUpdate, ActionDelete, ActionMove:
		default:
			return fmt.Errorf("step %d: unknown action %q", i+1, s.Action)
		}
		clean, err := storage.CleanPath(s.Path)
		if err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
		s.Path = clean
		if s.Action == ActionMove {
			if s.ToPath, err = storage.CleanPath(s.ToPath); err != nil {
				return fmt.Errorf("step %d: toPath: %w", i+1, err)
			}
		}
	}
	return nil
}

// structuredPlan asks the plan task's model for its plan as JSON; with
// agents (an expanding plan: the project's agents by name), for its tasks
// too.
func (r *Runner) structuredPlan(ctx context.Context, lp *loop, messages []llm.Message, agents map[string]uuid.UUID) (*Plan, error) {
	ask := "Now give the plan as JSON matching the schema: steps in dependency order, descriptions in words, no code."
	if agents != nil {
		names := slices.Sorted(maps.Keys(agents))
		ask += fmt.Sprintf(" Also break the work into tasks (at most %d) that the project's agents will run, each with a key, "+
			"and the keys of the tasks that must succeed before it; the project's agents are: %s.", maxPlannedTasks, strings.Join(names, ", "))
		if len(names) == 0 {
			ask = strings.TrimSuffix(ask, "the project's agents are: .") + "the project has no agents: leave agent empty."
		}
	}
	messages = append(messages, llm.Message{Role: llm.RoleUser, Content: ask})
	lp.iterations++
	resp, err := lp.generate(ctx, messages, &llm.ResponseSchema{Name: "plan", Schema: planSchema(agents != nil), Strict: true})
	if err != nil {
		return nil, err
	}
	var plan Plan
	dec := json.NewDecoder(strings.NewReader(stripFences(resp.Message.Content)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&plan); err != nil {
		return nil, &taskError{CodePlanInvalid, fmt.Errorf("the model's plan is not valid JSON for the plan schema: %w", err)}
	}
	if err := plan.validate(); err != nil {
		return nil, &taskError{CodePlanInvalid, err}
	}
	if agents == nil && len(plan.Tasks) > 0 {
		return nil, &taskError{CodePlanInvalid, errors.New("the plan has tasks, but the task did not ask to expand (input.expand)")}
	}
	if err := plan.validateTasks(agents); err != nil {
		return nil, &taskError{CodePlanInvalid, err}
	}
	return &plan, nil
}

// validateTasks checks an expanding plan's tasks: unique keys, known types
// and agents, priorities 1 to 4 (0: 2), dependencies on tasks of the plan
// and no cycle among them.
func (p *Plan) validateTasks(agents map[string]uuid.UUID) error {
	if len(p.Tasks) > maxPlannedTasks {
		return fmt.Errorf("the plan has %d tasks; at most %d", len(p.Tasks), maxPlannedTasks)
	}
	byKey := map[string]*PlanTask{}
	for i := range p.Tasks {
		t := &p.Tasks[i]
		switch {
		case strings.TrimSpace(t.Key) == "":
			return fmt.Errorf("task %d has no key", i+1)
		case byKey[t.Key] != nil:
			return fmt.Errorf("task key %q is used twice", t.Key)
		case strings.TrimSpace(t.Prompt) == "":
			return fmt.Errorf("task %q has no prompt", t.Key)
		case t.Type != "chat" && t.Type != "plan" && t.Type != "build":
			return fmt.Errorf("task %q: type %q is not chat, plan or build", t.Key, t.Type)
		case t.Priority < 0 || t.Priority > 4:
			return fmt.Errorf("task %q: priority %d is not 1 to 4", t.Key, t.Priority)
		}
		if t.Priority == 0 {
			t.Priority = 2
		}
		if _, ok := agents[t.Agent]; t.Agent != "" && !ok {
			return fmt.Errorf("task %q: %q is not an agent of this project", t.Key, t.Agent)
		}
		byKey[t.Key] = t
	}
	// Depth-first: a task met again while its own dependencies are being
	// walked closes a cycle.
	state := map[string]int{} // 1 walking, 2 done
	var walk func(key string) error
	walk = func(key string) error {
		switch state[key] {
		case 1:
			return fmt.Errorf("the tasks' dependencies form a cycle through %q", key)
		case 2:
			return nil
		}
		state[key] = 1
		for _, dep := range byKey[key].DependsOn {
			if byKey[dep] == nil || dep == key {
				return fmt.Errorf("task %q depends on %q, which is not another task of the plan", key, dep)
			}
			if err := walk(dep); err != nil {
				return err
			}
		}
		state[key] = 2
		return nil
	}
	for _, t := range p.Tasks {
		if err := walk(t.Key); err != nil {
			return err
		}
	}
	return nil
}

// plannedTasks is the plan's tasks as the database makes them.
func (p *Plan) plannedTasks(agents map[string]uuid.UUID) []agentsql.PlannedTask {
	out := make([]agentsql.PlannedTask, 0, len(p.Tasks))
	for _, t := range p.Tasks {
		pt := agentsql.PlannedTask{Key: t.Key, Title: t.Title, Prompt: t.Prompt, Type: agentsql.TaskType(t.Type),
			Priority: t.Priority, DependsOn: t.DependsOn}
		if id, ok := agents[t.Agent]; ok {
			pt.AgentID = &id
		}
		if pt.DependsOn == nil {
			pt.DependsOn = []string{}
		}
		out = append(out, pt)
	}
	return out
}

// loadPlan reads the plan of input.plan_task_id, if the build has one.
func (r *Runner) loadPlan(ctx context.Context, task agentsql.Task) (*Plan, error) {
	var input struct {
		PlanTaskID string `json:"plan_task_id"`
	}
	if len(task.Input) > 0 {
		if err := json.Unmarshal(task.Input, &input); err != nil {
			return nil, &taskError{CodePlanNotFound, fmt.Errorf("read input of task %s: %w", task.ID, err)}
		}
	}
	if input.PlanTaskID == "" {
		return nil, nil
	}
	id, err := uuid.Parse(input.PlanTaskID)
	if err != nil {
		return nil, &taskError{CodePlanNotFound, fmt.Errorf("input.plan_task_id %q is not a uuid", input.PlanTaskID)}
	}
	pt, err := agentsql.GetTask(ctx, r.deps.Pool, id)
	if err != nil && !errors.Is(err, agentsql.ErrTaskNotFound) {
		return nil, err
	}
	// Another project's task is reported exactly as a missing one: this
	// error is stored on the task, which its own project reads.
	if err != nil || pt.ProjectID != task.ProjectID {
		return nil, &taskError{CodePlanNotFound, fmt.Errorf("input.plan_task_id %s: %w", id, agentsql.ErrTaskNotFound)}
	}
	if pt.Type != "plan" || pt.Status != agentsql.StatusSucceeded {
		return nil, &taskError{CodePlanNotFound, fmt.Errorf("input.plan_task_id %s is a %s task in status %s, not a succeeded plan",
			pt.ID, pt.Type, pt.Status)}
	}
	var res Result
	if err := json.Unmarshal(pt.Result, &res); err != nil || res.Plan == nil {
		return nil, &taskError{CodePlanNotFound, fmt.Errorf("plan task %s has no plan in its result", pt.ID)}
	}
	return res.Plan, nil
}

// runPlan executes a plan step by step, each step a decision with an
// expectation (the files it changes), then checks the result; failing
// checks go to the tool loop in the FIX state.
func (r *taskRun) runPlan(ctx context.Context, messages []llm.Message) (string, []llm.Message, error) {
	var done []string
	for i, step := range r.plan.Steps {
		id := step.ID
		status, err := agentsql.DecisionStatus(ctx, r.runner.deps.Pool, r.task.ID, id)
		if err != nil {
			return "", messages, err
		}
		if status != "" {
			if _, err := r.rec.Emit(ctx, events.Log{Level: events.LevelInfo, Message: fmt.Sprintf("decision %s already executed (%s); not repeated", id, status),
				Metadata: map[string]any{"decisionId": id}}); err != nil {
				return "", messages, err
			}
			continue
		}
		expect := []string{step.Path}
		if step.Action == ActionMove {
			expect = append(expect, step.ToPath)
		}
		if _, err := r.rec.Emit(ctx, events.Log{Level: events.LevelInfo, Message: fmt.Sprintf("decision %s: %s %s", id, step.Action, step.Path),
			Metadata: map[string]any{"decisionId": id, "step": i + 1, "action": step.Action, "expectation": map[string]any{"worldChange": expect, "taskProgress": step.Description}}}); err != nil {
			return "", messages, err
		}
		before, err := r.snapshot(ctx, expect)
		if err != nil {
			return "", messages, err
		}
		if err := r.execute(ctx, step); err != nil {
			return "", messages, err
		}
		after, err := r.snapshot(ctx, expect)
		if err != nil {
			return "", messages, err
		}
		reason := expectationUnmet(step, before, after)
		verdict := agentsql.DecisionAccepted
		if reason != "" {
			verdict = agentsql.DecisionRejected
		}
		outcome, _ := json.Marshal(map[string]any{"expected": expect, "reason": reason})
		if _, err := agentsql.RecordDecision(ctx, r.runner.deps.Pool, r.at.fence(r.task), id, verdict, outcome); err != nil {
			return "", messages, err
		}
		if reason != "" {
			return "", messages, &BlockedError{DecisionID: id, Reason: reason}
		}
		done = append(done, fmt.Sprintf("%s %s", step.Action, step.Path))
	}
	rep, err := r.check(ctx)
	if err != nil {
		return "", messages, err
	}
	summary := fmt.Sprintf("Executed the plan (%d steps): %s. %s.", len(done), strings.Join(done, "; "), rep.String())
	if rep.Passed() {
		return summary, messages, nil
	}
	// FIX: the model gets the tools and the problems.
	messages = append(messages, llm.Message{Role: llm.RoleUser, Content: "The plan's steps were executed; the files are staged. " +
		"The static checks found problems (state: FIX):\n" + rep.String() + "Fix them with the tools, then call finish."})
	r.pauseRead, r.dayCapRead, r.cappedRead = nil, nil, nil // the steps and checks ran since the claim or a checkpoint read them
	return r.repairLoop(ctx, messages)
}

// snapshot returns the version of each path ("" when missing).
func (r *taskRun) snapshot(ctx context.Context, paths []string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range paths {
		info, err := r.store.Stat(ctx, r.task.ProjectID.String(), p)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			out[p] = ""
		case err != nil:
			return nil, err
		default:
			out[p] = info.ETag
		}
	}
	return out, nil
}

// expectationUnmet compares the world before and after a step with what
// the step expected; "" means met.
func expectationUnmet(s PlanStep, before, after map[string]string) string {
	switch s.Action {
	case ActionCreate, ActionUpdate:
		if after[s.Path] == "" {
			return fmt.Sprintf("%s was expected to exist after %s, and does not", s.Path, s.Action)
		}
		if after[s.Path] == before[s.Path] {
			return fmt.Sprintf("%s was expected to change, and did not", s.Path)
		}
	case ActionDelete:
		if after[s.Path] != "" {
			return fmt.Sprintf("%s was expected to be deleted, and still exists", s.Path)
		}
		if before[s.Path] == "" {
			return fmt.Sprintf("%s was expected to be deleted, but did not exist", s.Path)
		}
	case ActionMove:
		if after[s.Path] != "" || after[s.ToPath] == "" {
			return fmt.Sprintf("%s was expected to move to %s", s.Path, s.ToPath)
		}
	}
	return ""
}

// execute runs one step: code is generated as plain text (not inside
// JSON), then written through the tools, so the step has the usual
// tool_call and file_update events.
func (r *taskRun) execute(ctx context.Context, s PlanStep) error {
	callID := "plan-" + s.ID
	var name string
	var args map[string]any
	switch s.Action {
	case ActionDelete:
		name, args = "delete_file", map[string]any{"path": s.Path}
	case ActionMove:
		name, args = "move_file", map[string]any{"fromPath": s.Path, "toPath": s.ToPath}
	default:
		code, err := r.generate(ctx, s)
		if err != nil {
			return err
		}
		if strings.TrimSpace(code) == "" {
			// Nothing to write; the expectation check says so.
			_, err := r.rec.Emit(ctx, events.Log{Level: events.LevelWarn, Message: fmt.Sprintf("decision %s: the model generated no code for %s", s.ID, s.Path)})
			return err
		}
		name, args = "write_file", map[string]any{"path": s.Path, "content": code}
	}
	raw, _ := json.Marshal(args)
	res, err := r.lp.callTool(ctx, llm.ToolCall{ID: callID, Name: name, Arguments: string(raw)})
	if err != nil {
		return err
	}
	r.lp.account(llm.ToolCall{ID: callID, Name: name, Arguments: string(raw)}, res)
	return nil
}

// generate asks the model for one file's code as plain text.
func (r *taskRun) generate(ctx context.Context, s PlanStep) (string, error) {
	cg := prompts.CodeGen{Task: r.task.Prompt, Path: s.Path, Language: language(s.Path), Description: s.Description}
	content, _, err := r.store.Read(ctx, r.task.ProjectID.String(), s.Path)
	switch {
	case err == nil:
		cg.Exists, cg.Existing = true, string(content)
	case !errors.Is(err, storage.ErrNotFound):
		return "", err
	}
	system, err := r.runner.prompts.CodeGenSystem(cg)
	if err != nil {
		return "", &taskError{CodeInternal, err}
	}
	rules, err := r.rules.forPath(ctx, r.store, r.task.ProjectID.String(), s.Path)
	if err != nil {
		return "", &taskError{CodeStorage, err}
	}
	system += rules
	r.lp.iterations++
	if _, err := r.rec.Emit(ctx, events.Progress{Kind: events.KindIterationStart, Iteration: r.lp.iterations, TotalIterations: r.lp.maxIterations,
		Message: "generating " + s.Path}); err != nil {
		return "", err
	}
	resp, err := r.lp.generate(ctx, []llm.Message{{Role: llm.RoleSystem, Content: system}, {Role: llm.RoleUser, Content: s.Description}}, nil)
	if err != nil {
		return "", err
	}
	return stripFences(resp.Message.Content), nil
}

var fence = regexp.MustCompile("(?s)^\\s*```[\\w.+-]*[ \\t]*\\n(.*?)\\n?```\\s*$")

// stripFences removes a markdown code fence around a model's output.
func stripFences(s string) string {
	if m := fence.FindStringSubmatch(s); m != nil {
		s = m[1]
		if !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		return s
	}
	return s
}

func language(p string) string {
	switch path.Ext(p) {
	case ".ts":
		return "TypeScript"
	case ".tsx":
		return "TypeScript React (TSX)"
	case ".js", ".mjs", ".cjs":
		return "JavaScript"
	case ".jsx":
		return "JavaScript React (JSX)"
	case ".css":
		return "CSS"
	case ".html":
		return "HTML"
	case ".json":
		return "JSON"
	case ".go":
		return "Go"
	case ".vue":
		return "Vue single-file component"
	case ".md":
		return "Markdown"
	}
	return "plain text"
}
