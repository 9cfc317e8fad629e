package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/api"
	"github.com/agentworker/agentworker/archive"
	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/console"
	"github.com/agentworker/agentworker/events/sse"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/prereq"
	"github.com/agentworker/agentworker/testing/s3test"
	"github.com/agentworker/agentworker/worker"
)

func TestMain(m *testing.M) {
	dbtest.Main(m, s3test.LeakOption())
}

func TestServesEmbeddedPage(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(console.Handler())
	defer srv.Close()
	for path, want := range map[string]string{"/": "text/html", "/app.js": "text/javascript", "/state.js": "text/javascript",
		"/api.js": "text/javascript", "/style.css": "text/css",
		"/board.js": "text/javascript", "/agents.js": "text/javascript", "/board.css": "text/css", "/runs.js": "text/javascript",
		"/review.js": "text/javascript", "/errors.js": "text/javascript", "/markdown.js": "text/javascript",
		"/dom.js": "text/javascript", "/vendor/marked.esm.js": "text/javascript", "/vendor/purify.es.js": "text/javascript"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, want) {
			t.Errorf("%s: status %d, content type %q, want %s", path, resp.StatusCode, ct, want)
		}
		// No page of another origin may frame the console (its buttons
		// would be clickjacked with the victim's stored token).
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if xfo, nosniff := resp.Header.Get("X-Frame-Options"), resp.Header.Get("X-Content-Type-Options"); xfo != "DENY" || nosniff != "nosniff" {
			t.Errorf("%s: X-Frame-Options %q, X-Content-Type-Options %q", path, xfo, nosniff)
		}
	}
}

// chromium returns the path of the headless browser: CHROMIUM_BIN, else
// Debian's /usr/bin/chromium (what ./scripts/test installs). Without it the
// test skips (fails with CI=true).
func chromium(t *testing.T) string {
	t.Helper()
	path := os.Getenv("CHROMIUM_BIN")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		prereq.Missing(t, "Chromium", err)
	}
	return path
}

// pipeline is the real pipeline behind the page, wired as agentworker serve
// wires it: Postgres, MinIO, a River worker with a scripted model, the API
// and the page.
type pipeline struct {
	verifier *auth.Verifier
	pool     *pgxpool.Pool
	store    *storage.S3
	archive  *archive.Archiver // the streams read archived timelines from it
	srv      *httptest.Server
	project  uuid.UUID
	token    string
}

func newConsole(t *testing.T, model scripted.Responder) *pipeline {
	t.Helper()
	c := &pipeline{project: uuid.New()}
	var err error
	if c.pool, err = pgxpool.New(t.Context(), dbtest.NewURL(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.pool.Close)
	c.store = s3test.NewStore(t)
	lc := llmtest.NewWith(t, model).Config()
	lc.MaxRetries = -1
	client, err := llm.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	runner, err := handlers.NewRunner(handlers.Deps{Pool: c.pool, Store: c.store, LLM: client, Logger: logger}, handlers.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := worker.New(c.pool, runner.Handlers(), worker.Config{Concurrency: 4, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			t.Errorf("stop worker: %v", err)
		}
	})

	if c.verifier, err = auth.NewVerifier("browser-test-secret-0123456789", nil); err != nil {
		t.Fatal(err)
	}
	srvCtx, stopSrv := context.WithCancel(context.Background())
	hub := sse.NewHub(c.pool, logger)
	hubDone := make(chan struct{})
	go func() { defer close(hubDone); _ = hub.Run(srvCtx) }()
	mux := http.NewServeMux()
	if c.archive, err = archive.New(c.pool, c.store, archive.Config{TempDir: t.TempDir(), Logger: logger}); err != nil {
		t.Fatal(err)
	}
	streams := sse.NewStreams(c.pool, hub, sse.Config{Logger: logger, Archive: c.archive})
	api.New(c.pool, streams, api.Config{Verifier: c.verifier, Logger: logger, Store: c.store}).Register(mux)
	mux.Handle("GET /", console.Handler())
	c.srv = httptest.NewUnstartedServer(mux)
	c.srv.Config.BaseContext = func(net.Listener) context.Context { return srvCtx }
	c.srv.Start()
	t.Cleanup(func() { <-hubDone; c.srv.Close() })
	t.Cleanup(stopSrv)

	c.token = c.tokenFor(t, time.Hour)
	return c
}

// tokenFor signs a bearer token of the console's project only, as an
// operator would get one, valid for d.
func (c *pipeline) tokenFor(t *testing.T, d time.Duration) string {
	t.Helper()
	tok, err := c.verifier.Sign(auth.Claims{Projects: []string{c.project.String()},
		RegisteredClaims: jwt.RegisteredClaims{Subject: "operator", ExpiresAt: jwt.NewNumericDate(time.Now().Add(d))}})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// api calls the API with the console's token, as another client of the
// project would, and returns the answer's body; an answer other than 2xx
// fails the test.
func (c *pipeline) api(t *testing.T, method, path, body string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, c.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s with %s: %d %s (%v)", method, path, body, resp.StatusCode, out, err)
	}
	return out
}

// page is the console's address with the project and token, as a link
// handed to an operator.
func (c *pipeline) page() string {
	return c.pageWith(c.token)
}

func (c *pipeline) pageWith(token string) string {
	return c.srv.URL + "/?" + url.Values{"project": {c.project.String()}, "token": {token}}.Encode()
}

// browsers bounds the Chromiums the package's parallel tests run at once:
// a dozen on two CPUs made each so slow that a test's own bound ran out.
var browsers = make(chan struct{}, 3)

// browse starts a headless Chromium with a fresh profile and returns a
// context for its first tab, bounded to d from when the browser started
// (after waiting for a turn among browsers).
func browse(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	select {
	case browsers <- struct{}{}:
	case <-t.Context().Done():
		t.Fatal("no turn for a browser before the test ended")
	}
	t.Cleanup(func() { <-browsers })
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1440, 1000),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	tab, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelTab)
	if err := chromedp.Do(tab); err != nil { // starts the browser, without a timeout
		t.Fatalf("start chromium: %v", err)
	}
	tabs.Store(t, tab)
	t.Cleanup(func() { tabs.Delete(t) })
	ctx, cancel := context.WithTimeout(tab, d)
	t.Cleanup(cancel)
	return ctx
}

// tabs holds each test's tab without browse's bound, so that a step that
// ran out of time can still say what the page showed.
var tabs sync.Map // *testing.T → context.Context

// logPage logs what t's page shows: its address, whether it loaded, and
// the start of its text. A step that waited past its bound says no more
// than "context deadline exceeded" (a CI run's runs view did).
func logPage(t *testing.T) {
	t.Helper()
	tab, ok := tabs.Load(t)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(tab.(context.Context), 10*time.Second)
	defer cancel()
	state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({url: location.href, ready: document.readyState,
		text: document.body ? document.body.innerText.slice(0, 1500) : null})`))
	if err != nil {
		t.Logf("the page: not read: %v", err)
		return
	}
	t.Logf("the page: %s", state)
}

// screenshot saves the page as name.png under $TEST_ARTIFACTS (else the
// test's temp dir) and logs the path.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := os.Getenv("TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// run runs chromedp actions, failing the test with what they were for.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		logPage(t)
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page (awaiting a promise)
// into v.
func eval[T any](t *testing.T, ctx context.Context, expr string, v *T) {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	*v = got
}

// The actions on elements, by CSS selector.
func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}
func enabled(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitEnabled(chromedp.CSS(sel))
}
func click(sel string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.CSS(sel)) }
func keys(sel, v string) chromedp.Action[chromedp.Void] {
	return chromedp.SendKeys(chromedp.CSS(sel), v)
}
func setValue(sel, v string) chromedp.Action[chromedp.Void] {
	return chromedp.SetValue(chromedp.CSS(sel), v)
}

// submitBuild creates a build task from the page's form, with the form
// actions given (agent, priority, dependencies), and returns its id: the
// page selects the task it created. The wait is bounded by the test's
// browser, not the poll's 30 s (a loaded machine took longer once); a
// refusal the page shows ends it, with its text.
func submitBuild(t *testing.T, ctx context.Context, prompt string, form ...chromedp.Action[chromedp.Void]) string {
	t.Helper()
	var before string
	eval(t, ctx, `document.body.dataset.task || ""`, &before)
	eval(t, ctx, `document.getElementById("message").textContent = ""`, new(string))
	actions := append([]chromedp.Action[chromedp.Void]{setValue(`#type`, "build"), keys(`#prompt`, prompt)}, form...)
	actions = append(actions, click(`#submit`),
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`(document.body.dataset.task && document.body.dataset.task !== %q) || document.getElementById("message").textContent`, before),
			chromedp.WithPollingTimeout(0)))
	run(t, ctx, "submit "+prompt, actions...)
	var id, refused string
	eval(t, ctx, `document.getElementById("message").textContent`, &refused)
	eval(t, ctx, `document.body.dataset.task`, &id)
	if refused != "" || id == before {
		t.Fatalf("submit %s: the page says %q", prompt, refused)
	}
	return id
}

// dependOn ticks tasks in the form's dependencies, once each is listed.
func dependOn(ids ...string) []chromedp.Action[chromedp.Void] {
	var actions []chromedp.Action[chromedp.Void]
	for _, id := range ids {
		sel := fmt.Sprintf(`#depends-on input[value="%s"]`, id)
		actions = append(actions, visible(sel), click(sel))
	}
	return actions
}

// until waits until a JavaScript expression is truthy.
func until(expr string) chromedp.Action[chromedp.Void] { return chromedp.Poll[chromedp.Void](expr) }

// gatedModel writes two files, waits for the test's signal, moves one of
// them, then finishes.
func gatedModel(gate <-chan struct{}) scripted.Responder {
	replies := []scripted.Reply{
		llmtest.Call("write_file", map[string]string{"path": "a.txt", "content": "alpha\n"}),
		llmtest.Call("write_file", map[string]string{"path": "src/b.txt", "content": "beta\n"}),
		llmtest.Call("move_file", map[string]string{"fromPath": "src/b.txt", "toPath": "lib/b.txt"}),
		{Content: "Moved b.txt into lib.", ToolCalls: []llm.ToolCall{{Name: "finish", Arguments: `{"summary":"wrote a.txt and lib/b.txt"}`}}},
	}
	var mu sync.Mutex
	n := 0
	return scripted.Func(func(*scripted.Request) scripted.Reply {
		mu.Lock()
		i := n
		n++
		mu.Unlock()
		if i == 2 {
			select {
			case <-gate:
			case <-time.After(60 * time.Second):
			}
		}
		if i < len(replies) {
			return replies[i]
		}
		return scripted.Reply{Status: 500, ErrorMessage: "script exhausted"}
	})
}

// TestActivityTimelineInChromium submits a build through the page in a real
// headless Chromium and watches the stages, the files it touches and a
// move arrive, through a dropped connection.
func TestActivityTimelineInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	gate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	t.Cleanup(openGate)
	c := newConsole(t, gatedModel(gate))
	ctx := browse(t, 90*time.Second)

	run(t, ctx, "submit and see the files",
		chromedp.Navigate(c.page()),
		visible(`#submit`),
		setValue(`#type`, "build"),
		keys(`#prompt`, "write a.txt and src/b.txt, then move b.txt to lib/"),
		click(`#submit`),
		visible(`#tree li.file-node[data-path="a.txt"]`),
		visible(`#tree li.file-node[data-path="src/b.txt"]`),
		click(`#tree li.file-node[data-path="src/b.txt"]`),
		visible(`#tree li.file-node.selected[data-path="src/b.txt"]`),
	)
	// A network drop while the task runs: EventSource resumes with
	// Last-Event-ID and the page must apply every event once.
	c.srv.CloseClientConnections()
	openGate() // now the model moves src/b.txt
	run(t, ctx, "watch the move and the end",
		visible(`#tree li.file-node.selected[data-path="lib/b.txt"]`),
		visible(`body[data-status="completed"]`),
	)
	var state struct {
		StagesDone int    `json:"stagesDone"`
		Duplicates string `json:"duplicates"`
		Applied    string `json:"applied"`
		LastSeq    string `json:"lastSeq"`
		OldGone    bool   `json:"oldGone"`
		Selected   string `json:"selected"`
	}
	eval(t, ctx, `({
		stagesDone: document.querySelectorAll('#stages li.done').length,
		duplicates: document.body.dataset.duplicates || "0",
		applied: document.body.dataset.applied,
		lastSeq: document.body.dataset.lastSeq,
		oldGone: !document.querySelector('#tree li.file-node[data-path="src/b.txt"]'),
		selected: document.getElementById('selected').textContent,
	})`, &state)
	if state.StagesDone != 7 || !state.OldGone || state.Selected != "lib/b.txt" {
		t.Errorf("stages done %d/7, src/b.txt gone %v, selected %q", state.StagesDone, state.OldGone, state.Selected)
	}
	var taskLastSeq string
	if err := c.pool.QueryRow(t.Context(), `SELECT last_seq::text FROM ai_tasks WHERE project_id = $1`, c.project).Scan(&taskLastSeq); err != nil {
		t.Fatal(err)
	}
	if state.Duplicates != "0" || state.Applied != state.LastSeq || state.LastSeq != taskLastSeq {
		t.Errorf("after a drop the page applied %s events up to seq %s with %s duplicates; the task has %s",
			state.Applied, state.LastSeq, state.Duplicates, taskLastSeq)
	}
	screenshot(t, ctx, "activity-timeline")

	// The files are really in MinIO where the tree says.
	if data, _, err := c.store.Read(t.Context(), c.project.String(), "lib/b.txt"); err != nil || string(data) != "beta\n" {
		t.Errorf("lib/b.txt in MinIO = %q, %v", data, err)
	}
}

// TestPageStateInChromium checks the page's DOM-free state in the browser's
// own JavaScript: the 100-event window keeps a move's two halves together,
// and the task list keeps the server's rows, newest first, never replacing
// a row with an older version of it.
func TestPageStateInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	srv := httptest.NewServer(console.Handler())
	t.Cleanup(srv.Close)
	ctx := browse(t, 60*time.Second)
	run(t, ctx, "open the page", chromedp.Navigate(srv.URL), chromedp.WaitReady(chromedp.CSS(`body`)))
	var got struct {
		Kept       int      `json:"kept"`
		MoveHalves []string `json:"moveHalves"`
		Order      []string `json:"order"`
		Status     string   `json:"status"`
		Iterations int      `json:"iterations"`
		Unknown    bool     `json:"unknown"`
		Stale      bool     `json:"stale"`
		Age        []string `json:"age"`
	}
	eval(t, ctx, `import("/state.js").then(({ Timeline, TaskList, age }) => {
		const t = new Timeline(100);
		let seq = 0;
		const add = (type, payload) => t.add({ seq: ++seq, task_id: "t", type, payload });
		add("tool_call", { toolName: "move_file", success: true, fromPath: "a", toPath: "b" });
		add("file_update", { op: "move", path: "b", fromPath: "a", toPath: "b" });
		for (let i = 0; i < 250; i++) add("log", { level: "info", message: "x" + i });

		const l = new TaskList();
		l.reset([{ id: "b", created_at: "2026-01-02T00:00:00Z", status: "running", version: 3, iterations: 1 },
		         { id: "a", created_at: "2026-01-01T00:00:00Z", status: "queued", version: 1 }]);
		l.upsert({ id: "c", created_at: "2026-01-03T00:00:00Z", status: "queued", version: 1 });
		l.upsert({ id: "b", created_at: "2026-01-02T00:00:00Z", status: "queued", version: 2 }); // late, older
		const seen = l.noteEvent({ task_id: "b", type: "progress", payload: { kind: "iteration_start", iteration: 2 } });
		const unknown = l.noteEvent({ task_id: "z", type: "log", payload: {} });
		const now = Date.parse("2026-01-01T02:00:00Z");
		return { kept: t.events.length, moveHalves: t.events.filter(e => e.type !== "log").map(e => e.type),
			order: l.rows().map(r => r.id), status: l.get("b").status, iterations: l.get("b").iterations,
			unknown: unknown.unknown, stale: seen.stale,
			age: [age("2026-01-01T01:59:30Z", now), age("2026-01-01T01:00:00Z", now), age("2025-12-30T02:00:00Z", now)] };
	})`, &got)
	if got.Kept != 100 || len(got.MoveHalves) != 2 {
		t.Errorf("event window kept %d events with move halves %v, want 100 with both halves", got.Kept, got.MoveHalves)
	}
	if strings.Join(got.Order, ",") != "c,b,a" || got.Status != "running" || got.Iterations != 2 || !got.Unknown || !got.Stale {
		t.Errorf("task list: order %v, b %s with %d iterations, unknown %v, stale %v", got.Order, got.Status, got.Iterations, got.Unknown, got.Stale)
	}
	if strings.Join(got.Age, ",") != "30s,1h,2d" {
		t.Errorf("ages = %v", got.Age)
	}
}

// consoleModel plays the agent for each prompt of TestConsoleInChromium,
// from the conversation alone (so resumed runs continue where they were).
func consoleModel() scripted.Responder {
	write := func(path, content string) scripted.Reply {
		return llmtest.Call("write_file", map[string]string{"path": path, "content": content})
	}
	finish := func(summary string) scripted.Reply {
		return llmtest.Call("finish", map[string]string{"summary": summary})
	}
	return scripted.Func(func(req *scripted.Request) scripted.Reply {
		last, prompt := req.LastUserMessage()
		step, lastResult := 0, ""
		for _, m := range req.Messages[last+1:] {
			step += len(m.ToolCalls)
			if m.Role == llm.RoleTool {
				lastResult = m.Content
			}
		}
		var script []scripted.Reply
		switch {
		case strings.Contains(prompt, "create hello.txt"):
			script = []scripted.Reply{write("hello.txt", "hello\n"), finish("created hello.txt")}
		case strings.Contains(prompt, "greet the world"):
			script = []scripted.Reply{write("hello.txt", "hello,\nworld\n"), finish("hello.txt greets the world")}
		case strings.Contains(prompt, "ask me"):
			var answer struct {
				Answer string `json:"answer"`
			}
			_ = json.Unmarshal([]byte(lastResult), &answer)
			script = []scripted.Reply{
				llmtest.Call("request_input", map[string]string{"question": "Which colour should the banner be?"}),
				write("banner.txt", answer.Answer+"\n"),
				finish("a " + answer.Answer + " banner"),
			}
		case strings.Contains(prompt, "take your time"):
			return scripted.Reply{Delay: 10 * time.Minute, Content: "cancelled before this"}
		}
		if step < len(script) {
			return script[step]
		}
		return scripted.Reply{Status: 400, ErrorMessage: fmt.Sprintf("no step %d for prompt %q", step, prompt)}
	})
}

// TestConsoleInChromium drives the console as an operator: builds started
// from the page and their diff, a question answered, a task cancelled and
// retried, the files and usage, and a reload that keeps it all.
func TestConsoleInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	c := newConsole(t, consoleModel())
	ctx := browse(t, 150*time.Second)
	row := func(id, status string) string {
		return fmt.Sprintf(`#tasks tr.task-row[data-id="%s"][data-status="%s"]`, id, status)
	}
	// submit runs a task from the page and returns its id (the page
	// selects the task it created).
	submit := func(prompt string) string {
		t.Helper()
		return submitBuild(t, ctx, prompt)
	}

	run(t, ctx, "open the console", chromedp.Navigate(c.page()), visible(`body[data-project-conn="live"]`))
	var search string
	eval(t, ctx, `location.search`, &search)
	if strings.Contains(search, "token") {
		t.Errorf("the token stayed in the address bar: %s", search)
	}

	// Two builds; the second's diff shows what it changed in the first's file.
	first := submit("create hello.txt saying hello")
	run(t, ctx, "the first build", visible(row(first, "succeeded")))
	second := submit("greet the world in hello.txt")
	run(t, ctx, "the second build's diff",
		visible(row(second, "succeeded")),
		click(`#tab-changes`),
		visible(`#changes .file-diff[data-path="hello.txt"][data-op="update"]`),
	)
	var diff []string
	eval(t, ctx, `[...document.querySelectorAll('#changes .file-diff[data-path="hello.txt"] .diff .line')].map(r => [...r.children].map(c => c.textContent).join("|"))`, &diff)
	// Each row: its line in the old file, in the new file, and its text.
	want := []string{"||@@ -1 +1,2 @@", "1||-hello", "|1|+hello,", "|2|+world"}
	if strings.Join(diff, "|") != strings.Join(want, "|") {
		t.Errorf("diff lines = %q, want %q", diff, want)
	}
	screenshot(t, ctx, "console-build-diff")

	// A question: the agent asks, the operator answers in the task view,
	// the build goes on with the answer.
	asker := submit("ask me which colour the banner should be")
	run(t, ctx, "the question",
		visible(row(asker, "awaiting_input")),
		visible(`#task-inbox .inbox-item.question input.answer`),
	)
	var question string
	eval(t, ctx, `document.querySelector('#task-inbox .inbox-item.question p').textContent`, &question)
	if question != "Which colour should the banner be?" {
		t.Errorf("question shown = %q", question)
	}
	screenshot(t, ctx, "console-question")
	// The lists are redrawn on every phase change of the project: an
	// answer being typed survives one.
	answerBox := `#task-inbox .inbox-item.question input.answer`
	run(t, ctx, "start typing", keys(answerBox, "bl"))
	if _, err := agentsql.InsertEvents(t.Context(), c.pool, uuid.MustParse(asker), c.project,
		[]agentsql.NewEvent{{Type: "agent_phase", Payload: []byte(`{"phase":"coder","action":"enter","summary":"meanwhile"}`)}}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "the page redraws", until(`[...document.querySelectorAll("#timeline *")].some(e => e.textContent.includes("meanwhile"))`),
		chromedp.Sleep(500*time.Millisecond)) // the project's redraw is debounced by 200 ms
	var typed string
	eval(t, ctx, `document.querySelector('`+answerBox+`').value`, &typed)
	if typed != "bl" {
		t.Fatalf("the answer being typed is %q after a redraw, want %q", typed, "bl")
	}
	run(t, ctx, "answer it",
		keys(answerBox, "ue"),
		click(`#task-inbox .inbox-item.question button[type="submit"]`),
		visible(row(asker, "succeeded")),
		click(`#tab-files`),
		visible(`#files li.file-node[data-path="banner.txt"]`),
		click(`#files li.file-node[data-path="banner.txt"]`),
		until(`document.getElementById("file-view").textContent === "blue\n"`),
	)

	// Cancel a running task, retry it, cancel it again.
	slow := submit("take your time")
	run(t, ctx, "cancel",
		visible(row(slow, "running")),
		enabled(`#cancel`),
		click(`#cancel`),
		visible(row(slow, "cancelled")),
		visible(`body[data-status="cancelled"]`),
		enabled(`#retry`),
	)
	screenshot(t, ctx, "console-cancelled")
	run(t, ctx, "retry and cancel again",
		click(`#retry`),
		visible(row(slow, "running")),
		enabled(`#cancel`),
		click(`#cancel`),
		visible(row(slow, "cancelled")),
	)
	if data, _, err := c.store.Read(t.Context(), c.project.String(), "hello.txt"); err != nil || string(data) != "hello,\nworld\n" {
		t.Errorf("hello.txt in MinIO = %q, %v", data, err)
	}

	// A reload shows the same list, from the server, and the same task.
	statuses := map[string]string{first: "succeeded", second: "succeeded", asker: "succeeded", slow: "cancelled"}
	run(t, ctx, "reload", chromedp.Reload(), visible(`body[data-project-conn="live"]`))
	for id, status := range statuses {
		run(t, ctx, "the reloaded list", visible(row(id, status)))
	}
	// The list renders first; the newest task is selected, and its view
	// opened, after it (a check made at once failed under load).
	run(t, ctx, "the newest task selected", visible(fmt.Sprintf(`body[data-task="%s"]`, slow)), visible(`#task-view`))
	var after struct {
		Rows     int    `json:"rows"`
		First    string `json:"first"`
		Selected string `json:"selected"`
		ViewOpen bool   `json:"viewOpen"`
	}
	eval(t, ctx, `({ rows: document.querySelectorAll('#tasks tr.task-row').length,
		first: document.querySelector('#tasks tr.task-row').dataset.id,
		selected: document.body.dataset.task, viewOpen: !document.getElementById('task-view').hidden })`, &after)
	if after.Rows != 4 || after.First != slow || after.Selected != slow || !after.ViewOpen {
		t.Errorf("after the reload: %+v; want 4 rows, newest (%s) first and selected", after, slow)
	}
	run(t, ctx, "usage",
		click(`#tab-usage`),
		visible(`#usage-days tr.usage-day`),
		visible(fmt.Sprintf(`#usage-tasks tr.usage-task[data-id="%s"]`, second)),
	)
	screenshot(t, ctx, "console-reload-usage")
}

// TestConsoleTokenExpiry: when the bearer's token expires the server ends
// the streams with an "expired" event, and the page says so instead of
// reconnecting with a token that can only be refused.
func TestConsoleTokenExpiry(t *testing.T) {
	t.Parallel()
	chromium(t)
	c := newConsole(t, consoleModel())
	ctx := browse(t, 60*time.Second)
	// The token is signed as the page is opened, not when the steps are
	// built: on a loaded machine the browser may take seconds to get there,
	// and a token already expired is refused outright (401), not ended.
	run(t, ctx, "open with a token that expires in 10 s",
		func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			return chromedp.Navigate(c.pageWith(c.tokenFor(t, 10*time.Second)))(ctx, tg)
		},
		visible(`body[data-project-conn="live"]`),
		visible(`body[data-project-conn="expired"]`),
		until(`document.getElementById("message").textContent.includes("token expired")`),
	)
}

// TestConsoleTokenRevoked: when an operator revokes the bearer's token the
// server ends the open streams with a "revoked" event, and the page says so
// instead of reconnecting with a token that can only be refused.
func TestConsoleTokenRevoked(t *testing.T) {
	t.Parallel()
	chromium(t)
	c := newConsole(t, consoleModel())
	ctx := browse(t, 60*time.Second)
	run(t, ctx, "open, then revoke the project's tokens",
		func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			return chromedp.Navigate(c.pageWith(c.tokenFor(t, time.Hour)))(ctx, tg)
		},
		visible(`body[data-project-conn="live"]`),
		func(ctx context.Context, _ *chromedp.Target) (chromedp.Void, error) {
			_, err := agentsql.RevokeTokens(ctx, c.pool, []string{c.project.String()})
			return chromedp.Void{}, err
		},
		visible(`body[data-project-conn="revoked"]`),
		until(`document.getElementById("message").textContent.includes("token was revoked")`),
	)
}

// TestConsoleLinkCannotSwapToken: a link carrying another token does not
// replace the stored one. The page keeps its project and says, always,
// which project and subject its token is for; the link's project is entered
// only when the person confirms it, and what they type meanwhile goes to
// their own project.
func TestConsoleLinkCannotSwapToken(t *testing.T) {
	t.Parallel()
	chromium(t)
	c := newConsole(t, consoleModel())
	other := uuid.New()
	attacker, err := c.verifier.Sign(auth.Claims{Projects: []string{other.String()},
		RegisteredClaims: jwt.RegisteredClaims{Subject: "attacker", ExpiresAt: jwtDate(time.Now().Add(time.Hour))}})
	if err != nil {
		t.Fatal(err)
	}
	link := c.srv.URL + "/?" + url.Values{"project": {other.String()}, "token": {attacker}}.Encode()
	ctx := browse(t, 90*time.Second)
	own := c.project.String()
	run(t, ctx, "open the own project",
		chromedp.Navigate(c.page()),
		visible(`body[data-project-conn="live"]`),
		until(`document.getElementById("identity").textContent.includes("`+own+`") && document.getElementById("identity").textContent.includes("operator")`),
	)
	run(t, ctx, "follow the attacker's link",
		chromedp.Navigate(link),
		visible(`#switch`),
		until(`document.getElementById("switch-text").textContent.includes("`+other.String()+`") && document.getElementById("switch-text").textContent.includes("attacker")`),
		visible(`body[data-project-conn="live"]`),
	)
	var state struct {
		Token, Project, Body, Identity, Search string
	}
	eval(t, ctx, `({token: localStorage.getItem("token"), project: localStorage.getItem("project"),
		body: document.body.dataset.project, identity: document.getElementById("identity").textContent, search: location.search})`, &state)
	if state.Token != c.token || state.Project != own || state.Body != own || !strings.Contains(state.Identity, "operator") {
		t.Fatalf("after the link: %+v; want the own token and project kept", state)
	}
	if strings.Contains(state.Search, "token") {
		t.Errorf("the token stayed in the address bar: %q", state.Search)
	}
	run(t, ctx, "type a prompt before deciding",
		setValue(`#prompt`, "my password is hunter2"),
		click(`#submit`),
		until(`document.querySelectorAll("#tasks tr.task-row").length >= 1`),
	)
	var inOther, inOwn int
	if err := c.pool.QueryRow(t.Context(), "SELECT count(*) FILTER (WHERE project_id = $1), count(*) FILTER (WHERE project_id = $2) FROM ai_tasks", other, c.project).Scan(&inOther, &inOwn); err != nil {
		t.Fatal(err)
	}
	if inOther != 0 || inOwn != 1 {
		t.Fatalf("tasks: %d in the link's project, %d in the own; want 0 and 1", inOther, inOwn)
	}
	run(t, ctx, "confirm entering the link's project",
		click(`#switch-confirm`),
		until(`document.body.dataset.project === "`+other.String()+`"`),
		until(`document.getElementById("identity").textContent.includes("attacker")`),
		until(`document.getElementById("switch").hidden`),
	)
	eval(t, ctx, `({token: localStorage.getItem("token"), project: localStorage.getItem("project"),
		body: document.body.dataset.project, identity: document.getElementById("identity").textContent, search: location.search})`, &state)
	if state.Token != attacker || state.Project != other.String() {
		t.Errorf("after confirming: %+v; want the link's token and project", state)
	}
	screenshot(t, ctx, "console-link-confirmed")

	// Declining keeps the page as it was.
	run(t, ctx, "decline a link back",
		chromedp.Navigate(c.page()),
		visible(`#switch`),
		click(`#switch-cancel`),
		until(`document.getElementById("switch").hidden`),
	)
	eval(t, ctx, `({token: localStorage.getItem("token"), project: localStorage.getItem("project"),
		body: document.body.dataset.project, identity: document.getElementById("identity").textContent, search: location.search})`, &state)
	if state.Token != attacker || state.Body != other.String() || strings.Contains(state.Search, "token") {
		t.Errorf("after declining: %+v; want the page unchanged", state)
	}
}

// TestRateLimitWaitInChromium: a task whose provider refuses a call for
// its rate limit shows, in the page's timeline, that it waits and for how
// long, then goes on to finish.
func TestRateLimitWaitInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	c := newConsole(t, scripted.Queue(
		llmtest.Error(http.StatusTooManyRequests, "2"),
		llmtest.Call("write_file", map[string]string{"path": "a.txt", "content": "alpha\n"}),
		scripted.Reply{ToolCalls: []llm.ToolCall{{Name: "finish", Arguments: `{"summary":"wrote a.txt"}`}}},
	))
	ctx := browse(t, 90*time.Second)
	run(t, ctx, "submit and wait for the end",
		chromedp.Navigate(c.page()),
		visible(`#submit`),
		setValue(`#type`, "build"),
		keys(`#prompt`, "write a.txt"),
		click(`#submit`),
		visible(`body[data-status="completed"]`),
	)
	var rows []string
	eval(t, ctx, `[...document.querySelectorAll('#timeline li')].map(li => li.textContent)`, &rows)
	found := false
	for _, r := range rows {
		found = found || strings.Contains(r, "waiting for the provider's rate limit (about 2s)")
	}
	if !found {
		t.Errorf("timeline rows %q show no rate-limit wait", rows)
	}
	screenshot(t, ctx, "rate-limit-wait")
}
