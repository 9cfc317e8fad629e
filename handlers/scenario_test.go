package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/testing/s3test"
	"github.com/agentworker/agentworker/worker"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata and the statement figure README quotes")

func TestMain(m *testing.M) {
	dbtest.Main(m, s3test.LeakOption())
}

type harness struct {
	pool    *pgxpool.Pool
	store   *storage.S3
	llm     *llmtest.Server
	svc     *worker.Service
	project uuid.UUID
}

// setup runs the whole pipeline against a real Postgres, a real MinIO and
// a scripted model, with files seeded into the project.
func setup(t *testing.T, replies []scripted.Reply, cfg handlers.Config, files map[string]string, opts ...llmtest.Option) *harness {
	t.Helper()
	return setupWith(t, handlers.Deps{}, replies, cfg, files, opts...)
}

// setupWith is setup with services of deps besides the pipeline's own
// (the sandbox).
func setupWith(t *testing.T, deps handlers.Deps, replies []scripted.Reply, cfg handlers.Config, files map[string]string, opts ...llmtest.Option) *harness {
	t.Helper()
	h := &harness{project: uuid.New()}
	var err error
	h.pool, err = pgxpool.New(t.Context(), dbtest.NewURL(t))
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(h.pool.Close)
	h.store = s3test.NewStore(t)
	for p, c := range files {
		if _, err := h.store.Write(t.Context(), h.project.String(), p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	h.llm = llmtest.NewWith(t, scripted.Queue(replies...), opts...)
	lc := h.llm.Config()
	lc.MaxRetries = -1
	client, err := llm.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	cfg.DisableStreaming = true
	deps.Pool, deps.Store, deps.LLM, deps.Logger = h.pool, h.store, client, logger
	runner, err := handlers.NewRunner(deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.svc, err = worker.New(h.pool, runner.Handlers(), worker.Config{Concurrency: 2, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.svc.Stop(ctx); err != nil {
			t.Errorf("stop worker: %v", err)
		}
	})
	return h
}

func (h *harness) insert(t *testing.T, taskType, prompt string, input any) uuid.UUID {
	t.Helper()
	in, _ := json.Marshal(input)
	if input == nil {
		in = []byte(`{}`)
	}
	var id uuid.UUID
	if err := h.pool.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt, input) VALUES ($1, $2, $3, $4) RETURNING id`,
		h.project, taskType, prompt, in).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// follow reads a task's events until stop returns true.
func (h *harness) follow(t *testing.T, id uuid.UUID, stop func(events.Event) bool) []events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var evs []events.Event
	err := events.Follow(ctx, h.pool, id, 0, func(ev events.Event) error {
		evs = append(evs, ev)
		if stop(ev) {
			return events.ErrStopFollowing
		}
		return nil
	})
	if err != nil {
		t.Fatalf("follow task %s: %v (%d events)", id, err, len(evs))
	}
	return evs
}

func (h *harness) wait(t *testing.T, id uuid.UUID) ([]events.Event, agentsql.Task) {
	t.Helper()
	evs := h.follow(t, id, events.Terminal)
	task, err := agentsql.GetTask(t.Context(), h.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return evs, task
}

func (h *harness) files(t *testing.T) map[string]string {
	t.Helper()
	list, err := h.store.List(t.Context(), h.project.String(), "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range list {
		c, _, err := h.store.Read(t.Context(), h.project.String(), f.Path)
		if err != nil {
			t.Fatal(err)
		}
		out[f.Path] = string(c)
	}
	return out
}

func result(t *testing.T, task agentsql.Task) handlers.Result {
	t.Helper()
	if task.Status != agentsql.StatusSucceeded {
		t.Fatalf("status = %s, error %s", task.Status, task.Error)
	}
	var res handlers.Result
	if err := json.Unmarshal(task.Result, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

func taskError(t *testing.T, task agentsql.Task) handlers.TaskError {
	t.Helper()
	var te handlers.TaskError
	if err := json.Unmarshal(task.Error, &te); err != nil {
		t.Fatalf("task error %s: %v", task.Error, err)
	}
	return te
}

// transcript renders the timeline's decisive events, one a line, for the
// golden files: tool calls, file updates, self-repair, errors, phases.
func transcript(t *testing.T, evs []events.Event) string {
	t.Helper()
	var b strings.Builder
	for _, ev := range evs {
		p, err := ev.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *events.ToolCall:
			ok := "ok"
			if !p.Success {
				ok = "FAILED: " + firstLine(p.ResultSummary)
			}
			fmt.Fprintf(&b, "tool_call %s %s → %s\n", p.ToolName, p.ArgsSummary, ok)
		case *events.FileUpdate:
			fmt.Fprintf(&b, "file_update %s %s\n", p.Op, p.Path)
		case *events.SelfRepair:
			fmt.Fprintf(&b, "self_repair attempt %d/%d trigger=%s result=%s\n", p.AttemptNumber, p.MaxAttempts, p.Trigger, p.Result)
		case *events.Error:
			fmt.Fprintf(&b, "error %s recoverable=%v\n", p.ErrorType, p.Recoverable)
		case *events.AgentPhase:
			if p.Action == "" {
				fmt.Fprintf(&b, "agent_phase %s %s\n", p.Phase, p.Status)
			}
		case *events.Log:
			if strings.HasPrefix(p.Message, "static checks") || strings.HasPrefix(p.Message, "change set") || strings.HasPrefix(p.Message, "decision") {
				fmt.Fprintf(&b, "log %s\n", p.Message)
			}
		}
	}
	return b.String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

func call(name string, args any) scripted.Reply { return llmtest.Call(name, args) }

type m = map[string]any

func TestMultiFileFeatureInDependencyOrder(t *testing.T) {
	t.Parallel()
	pkg := `{"name":"app","dependencies":{"react":"^18.3.0"}}`
	h := setup(t, []scripted.Reply{
		call("get_project_structure", m{}),
		call("read_file", m{"path": "src/App.tsx"}),
		call("write_file", m{"path": "src/lib/format.ts", "content": "export function money(n: number): string {\n  return `$${n.toFixed(2)}`\n}\n"}),
		call("write_file", m{"path": "src/components/Price.tsx", "content": "import { money } from '../lib/format'\n\nexport function Price({ value }: { value: number }) {\n  return <span className=\"price\">{money(value)}</span>\n}\n"}),
		call("edit_file", m{"path": "src/App.tsx", "old_string": "import React from 'react'\n", "new_string": "import React from 'react'\nimport { Price } from './components/Price'\n"}),
		call("edit_file", m{"path": "src/App.tsx", "old_string": "<h1>Shop</h1>", "new_string": "<h1>Shop</h1>\n      <Price value={9.5} />"}),
		call("finish", m{"summary": "Added Price (src/components/Price.tsx) using money() from src/lib/format.ts, shown in App."}),
	}, handlers.Config{}, map[string]string{
		"package.json": pkg,
		"src/App.tsx":  "import React from 'react'\n\nexport function App() {\n  return (\n    <div>\n      <h1>Shop</h1>\n    </div>\n  )\n}\n",
		"src/main.tsx": "import { App } from './App'\nexport default App\n",
	})
	id := h.insert(t, "build", "show prices with a Price component", nil)
	evs, task := h.wait(t, id)
	res := result(t, task)
	golden(t, "multi_file_feature", transcript(t, evs))
	files := h.files(t)
	if !strings.Contains(files["src/App.tsx"], "<Price value={9.5} />") || files["src/lib/format.ts"] == "" || files["src/components/Price.tsx"] == "" {
		t.Fatalf("project after the build: %v", files)
	}
	if res.Checks == nil || !res.Checks.Passed() || len(res.Checks.Checked) != 3 {
		t.Errorf("checks = %+v", res.Checks)
	}
	var changed []string
	for _, c := range res.FilesChanged {
		changed = append(changed, c.Op+" "+c.Path)
	}
	if strings.Join(changed, ",") != "create src/lib/format.ts,create src/components/Price.tsx,update src/App.tsx" {
		t.Errorf("filesChanged = %v", changed)
	}
	// The system prompt carries the project context.
	sys := h.llm.Requests()[0].Messages[0].Content
	for _, want := range []string{"Type: react (TypeScript)", "Entry points: src/main.tsx, src/App.tsx", "[state: IMPLEMENT]"} {
		if !strings.Contains(sys, want) {
			t.Errorf("system prompt lacks %q", want)
		}
	}
}

func TestEditFailsIsDiagnosedAndRepaired(t *testing.T) {
	t.Parallel()
	wrong := func(old string) scripted.Reply {
		return call("edit_file", m{"path": "src/greet.ts", "old_string": old, "new_string": "return 'hi'"})
	}
	h := setup(t, []scripted.Reply{
		wrong(`return "hello"`), wrong(`return "hello";`), wrong(`return 'helo'`),
		// The repair attempt: diagnose, then the smallest fix.
		call("read_file", m{"path": "src/greet.ts"}),
		call("edit_file", m{"path": "src/greet.ts", "old_string": "  return 'hello'", "new_string": "  return 'hi'"}),
		call("finish", m{"summary": "greet returns 'hi' (src/greet.ts)"}),
	}, handlers.Config{}, map[string]string{"src/greet.ts": "export function greet(): string {\n  return 'hello'\n}\n"})
	id := h.insert(t, "build", "make greet say hi", nil)
	evs, task := h.wait(t, id)
	res := result(t, task)
	golden(t, "edit_repaired", transcript(t, evs))
	if res.RepairAttempts != 1 {
		t.Errorf("repairAttempts = %d", res.RepairAttempts)
	}
	if got := h.files(t)["src/greet.ts"]; got != "export function greet(): string {\n  return 'hi'\n}\n" {
		t.Errorf("greet.ts = %q", got)
	}
	// The failed edit told the model where the nearest text is, whitespace visible.
	reqs := h.llm.Requests()
	toolMsg := reqs[1].Messages[len(reqs[1].Messages)-1].Content
	if !strings.Contains(toolMsg, "not found") || !strings.Contains(toolMsg, "return·'hello'") {
		t.Errorf("edit failure output = %s", toolMsg)
	}
	_, repairMsg := reqs[3].LastUserMessage()
	if !strings.Contains(repairMsg, "self-repair attempt 1 of 2") || !strings.Contains(repairMsg, "tool_failures") {
		t.Errorf("repair message = %q", repairMsg)
	}
}

func TestOscillationIsStoppedWithItsReason(t *testing.T) {
	t.Parallel()
	read := call("read_file", m{"path": "a.txt"})
	h := setup(t, []scripted.Reply{
		call("list_files", m{}), read, call("search_files", m{"query": "x"}), read, read,
	}, handlers.Config{MaxRepairAttempts: -1}, map[string]string{"a.txt": "x\n"})
	id := h.insert(t, "build", "do something", nil)
	evs, task := h.wait(t, id)
	golden(t, "oscillation", transcript(t, evs))
	te := taskError(t, task)
	if task.Status != agentsql.StatusFailed || te.Code != handlers.ReasonOscillation || !strings.Contains(te.Message, "3 times in the last 5") {
		t.Fatalf("status %s, error %+v", task.Status, te)
	}
}

func TestSyntaxErrorCaughtByStaticCheckThenFixed(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{
		call("write_file", m{"path": "src/sum.ts", "content": "export function sum(a: number, b: number) {\n  return a + b\n\n"}),
		call("write_file", m{"path": "src/config.json", "content": `{"name": "x",}`}),
		call("finish", m{"summary": "added sum"}),
		call("edit_file", m{"path": "src/sum.ts", "start_line": 3, "end_line": 3, "new_string": "}"}),
		call("write_file", m{"path": "src/config.json", "content": `{"name": "x"}`}),
		call("finish", m{"summary": "Added src/sum.ts and src/config.json; static checks pass."}),
	}, handlers.Config{}, nil)
	id := h.insert(t, "build", "add a sum function", nil)
	evs, task := h.wait(t, id)
	res := result(t, task)
	golden(t, "syntax_fixed", transcript(t, evs))
	if res.Checks == nil || !res.Checks.Passed() {
		t.Errorf("checks = %+v", res.Checks)
	}
	refusal := h.llm.Requests()[3].Messages
	out := refusal[len(refusal)-1].Content
	if !strings.Contains(out, "finish refused") || !strings.Contains(out, "src/sum.ts:4") || !strings.Contains(out, "[json]") {
		t.Errorf("finish refusal = %s", out)
	}
	if got := h.files(t)["src/sum.ts"]; !strings.HasSuffix(got, "return a + b\n}\n") {
		t.Errorf("sum.ts = %q", got)
	}
}

// planReplies is a plan task's script: explore, answer, then the plan as
// structured output.
func planReplies(plan handlers.Plan) []scripted.Reply {
	body, _ := json.Marshal(plan)
	return []scripted.Reply{
		call("get_project_structure", m{}),
		llmtest.Text("Plan: a helper, a component using it, and the entry wiring."),
		llmtest.Text(string(body)),
	}
}

func threeStepPlan() handlers.Plan {
	return handlers.Plan{Summary: "Add a greeting banner.", Steps: []handlers.PlanStep{
		{ID: "step-1", Action: handlers.ActionCreate, Path: "src/greeting.ts", Description: "export greeting(name) returning 'Hello, <name>!'", NeedsCodeGeneration: true},
		{ID: "step-2", Action: handlers.ActionCreate, Path: "src/banner.ts", Description: "export banner() that uses greeting('world')", NeedsCodeGeneration: true},
		{ID: "step-3", Action: handlers.ActionUpdate, Path: "src/main.ts", Description: "log banner()", NeedsCodeGeneration: true},
	}}
}

func TestPlanThenBuildInThreeSteps(t *testing.T) {
	t.Parallel()
	replies := append(planReplies(threeStepPlan()),
		llmtest.Text("```ts\nexport function greeting(name: string): string {\n  return `Hello, ${name}!`\n}\n```"),
		llmtest.Text("import { greeting } from './greeting'\n\nexport function banner(): string {\n  return greeting('world')\n}\n"),
		llmtest.Text("```typescript\nimport { banner } from './banner'\n\nconsole.log(banner())\n```\n"),
	)
	h := setup(t, replies, handlers.Config{}, map[string]string{"src/main.ts": "console.log('hi')\n"})
	planID := h.insert(t, "plan", "add a greeting banner", nil)
	_, planTask := h.wait(t, planID)
	planRes := result(t, planTask)
	if planRes.Plan == nil || len(planRes.Plan.Steps) != 3 {
		t.Fatalf("plan result = %s", planTask.Result)
	}
	if files := h.files(t); len(files) != 1 {
		t.Fatalf("the plan task changed the project: %v", files)
	}
	planReq := h.llm.Requests()[2]
	if !strings.Contains(string(planReq.Body), `"response_format":{"json_schema":{"name":"plan"`) || len(planReq.Tools) != 0 {
		t.Errorf("plan request body = %s", planReq.Body)
	}

	id := h.insert(t, "build", "add a greeting banner", m{"plan_task_id": planID})
	evs, task := h.wait(t, id)
	res := result(t, task)
	golden(t, "plan_build", transcript(t, evs))
	files := h.files(t)
	if files["src/greeting.ts"] != "export function greeting(name: string): string {\n  return `Hello, ${name}!`\n}\n" ||
		files["src/main.ts"] != "import { banner } from './banner'\n\nconsole.log(banner())\n" {
		t.Fatalf("project = %v", files)
	}
	if res.Checks == nil || !res.Checks.Passed() {
		t.Errorf("checks = %+v", res.Checks)
	}
	var decisions []string
	rows, _ := h.pool.Query(t.Context(), `SELECT decision_id || '=' || status FROM build_decisions WHERE task_id = $1 ORDER BY decision_id`, id)
	for rows.Next() {
		var d string
		_ = rows.Scan(&d)
		decisions = append(decisions, d)
	}
	if strings.Join(decisions, ",") != "step-1=accepted,step-2=accepted,step-3=accepted" {
		t.Errorf("decisions = %v", decisions)
	}
	// Code generation asked for plain text, with the plan step in the prompt.
	gen := h.llm.Requests()[3]
	if gen.Tools != nil || !strings.Contains(gen.Messages[0].Content, "File: src/greeting.ts (TypeScript)") {
		t.Errorf("codegen request: tools %v, system %q", gen.Tools, gen.Messages[0].Content)
	}
}

func TestExpectationMismatchBlocksTheTask(t *testing.T) {
	t.Parallel()
	replies := append(planReplies(threeStepPlan()),
		llmtest.Text("export function greeting(name: string): string {\n  return name\n}\n"),
		llmtest.Text("   "), // no code for step 2: the file will not exist
	)
	h := setup(t, replies, handlers.Config{}, map[string]string{"src/main.ts": "console.log('hi')\n"})
	planID := h.insert(t, "plan", "add a greeting banner", nil)
	h.wait(t, planID)
	id := h.insert(t, "build", "add a greeting banner", m{"plan_task_id": planID})
	evs, task := h.wait(t, id)
	golden(t, "expectation_blocked", transcript(t, evs))
	te := taskError(t, task)
	if task.Status != agentsql.StatusBlocked || te.Code != handlers.CodeExpectationMismatch || !strings.Contains(te.Message, "step-2") {
		t.Fatalf("status %s, error %+v", task.Status, te)
	}
	if files := h.files(t); len(files) != 1 || files["src/main.ts"] != "console.log('hi')\n" {
		t.Fatalf("a blocked build changed the project: %v", files)
	}
}

// TestPlanOfAnotherProjectIsNotFound: a build naming another project's
// plan fails exactly as one naming no task at all; the error, which the
// build's project reads, says nothing of the other task.
func TestPlanOfAnotherProjectIsNotFound(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, handlers.Config{}, map[string]string{"src/main.ts": "console.log('hi')\n"})
	plan := threeStepPlan()
	res, _ := json.Marshal(handlers.Result{Summary: "secret plan", Plan: &plan})
	var foreign uuid.UUID
	// A plan task of another project that succeeded: inserted queued (no
	// job), held, finished, as the state machine allows.
	if err := h.pool.QueryRow(t.Context(), `WITH skip AS (SELECT set_config('agentworker.skip_enqueue', 'on', true))
		INSERT INTO ai_tasks (project_id, type, prompt) SELECT $1, 'plan', 'theirs' FROM skip RETURNING id`,
		uuid.New()).Scan(&foreign); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE ai_tasks SET status = 'running', lease_owner = 'test', lease_expires_at = now() + interval '1 hour'` + dbtest.AsWorker + `WHERE id = $1`,
		`UPDATE ai_tasks SET status = 'succeeded', result = $2 WHERE id = $1`,
	} {
		args := []any{foreign}
		if strings.Contains(q, "$2") {
			args = append(args, res)
		}
		if _, err := h.pool.Exec(t.Context(), q, args...); err != nil {
			t.Fatal(err)
		}
	}
	missing := uuid.New()
	messages := map[uuid.UUID]string{}
	for _, planID := range []uuid.UUID{foreign, missing} {
		_, task := h.wait(t, h.insert(t, "build", "use the plan", m{"plan_task_id": planID}))
		te := taskError(t, task)
		if task.Status != agentsql.StatusFailed || te.Code != handlers.CodePlanNotFound {
			t.Fatalf("plan_task_id %s: status %s, error %+v", planID, task.Status, te)
		}
		messages[planID] = te.Message
	}
	if strings.ReplaceAll(messages[foreign], foreign.String(), missing.String()) != messages[missing] {
		t.Errorf("another project's plan: %q; no task: %q", messages[foreign], messages[missing])
	}
	if len(h.llm.Requests()) != 0 {
		t.Errorf("the model was called %d times", len(h.llm.Requests()))
	}
}

// TestShutdownMidBuildKeepsTheChangeSet stops the worker with no grace
// while a build thinks: nothing reaches the project, and the staged changes
// and the checkpoint stay for the attempt that continues the task.
func TestShutdownMidBuildKeepsTheChangeSet(t *testing.T) {
	t.Parallel()
	h := setup(t, []scripted.Reply{
		call("write_file", m{"path": "new.txt", "content": "new\n"}),
		call("edit_file", m{"path": "a.txt", "old_string": "old", "new_string": "changed"}),
		{Delay: time.Minute, Content: "never"},
	}, handlers.Config{}, map[string]string{"a.txt": "old\n"})
	id := h.insert(t, "build", "change things", nil)
	// Wait until both changes are staged and the model is thinking again.
	staged := 0
	h.follow(t, id, func(ev events.Event) bool {
		if ev.Type == events.TypeFileUpdate {
			staged++
		}
		return staged == 2
	})
	poll.Until(t, "the third model call", 10*time.Second, func() bool { return len(h.llm.Requests()) == 3 })
	// Stop with no grace, as a shutdown whose drain timed out does.
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	if err := h.svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	files := h.files(t)
	if len(files) != 1 || files["a.txt"] != "old\n" {
		t.Fatalf("project after shutdown = %v", files)
	}
	var status string
	var entries, iteration int
	if err := h.pool.QueryRow(t.Context(), `SELECT status, (SELECT count(*) FROM change_set_entries WHERE task_id = $1),
		(SELECT iteration FROM task_checkpoints WHERE task_id = $1) FROM change_sets WHERE task_id = $1`, id).Scan(&status, &entries, &iteration); err != nil {
		t.Fatal(err)
	}
	if status != agentsql.ChangeSetOpen || entries != 2 || iteration != 2 {
		t.Errorf("change set %s with %d entries, checkpoint at iteration %d; want open with 2, iteration 2", status, entries, iteration)
	}
	if _, _, err := h.store.Read(t.Context(), h.project.String(), "new.txt"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("new.txt: %v", err)
	}
}
