package timeline_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/api"
	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/events/sse"
	"github.com/agentworker/agentworker/events/timeline"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/prereq"
	"github.com/agentworker/agentworker/testing/s3test"
	"github.com/agentworker/agentworker/worker"
)

func TestMain(m *testing.M) {
	dbtest.Main(m, s3test.LeakOption())
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

func TestServesEmbeddedPage(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(timeline.Handler())
	defer srv.Close()
	for path, want := range map[string]string{"/": "text/html", "/app.js": "text/javascript", "/state.js": "text/javascript", "/style.css": "text/css"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || len(ct) < len(want) || ct[:len(want)] != want {
			t.Errorf("%s: status %d, content type %q, want %s", path, resp.StatusCode, ct, want)
		}
	}
}

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
// headless Chromium and watches the stages, files and a move arrive.
func TestActivityTimelineInChromium(t *testing.T) {
	t.Parallel()
	chromiumPath := chromium(t)

	// The real pipeline: Postgres, MinIO, River worker, scripted model.
	dbURL := dbtest.NewURL(t)
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := s3test.NewStore(t)
	gate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	t.Cleanup(openGate)
	model := llmtest.NewWith(t, gatedModel(gate))
	lc := model.Config()
	lc.MaxRetries = -1
	client, err := llm.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	runner, err := handlers.NewRunner(handlers.Deps{Pool: pool, Store: store, LLM: client, Logger: logger}, handlers.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := worker.New(pool, runner.Handlers(), worker.Config{Concurrency: 2, Logger: logger})
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

	// The gateway and the page, as agentworker serve wires them.
	verifier, err := auth.NewVerifier("browser-test-secret-0123456789", nil)
	if err != nil {
		t.Fatal(err)
	}
	srvCtx, stopSrv := context.WithCancel(context.Background())
	hub := sse.NewHub(pool, logger)
	hubDone := make(chan struct{})
	go func() { defer close(hubDone); _ = hub.Run(srvCtx) }()
	mux := http.NewServeMux()
	api.New(pool, sse.NewStreams(pool, hub, sse.Config{Logger: logger}), api.Config{Verifier: verifier, Logger: logger}).Register(mux)
	mux.Handle("GET /", timeline.Handler())
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.BaseContext = func(net.Listener) context.Context { return srvCtx }
	srv.Start()
	t.Cleanup(func() { <-hubDone; srv.Close() })
	t.Cleanup(stopSrv)

	projectID := uuid.New()
	var claims auth.Claims
	claims.Role = auth.RoleService
	claims.ExpiresAt = jwtDate(time.Now().Add(time.Hour))
	token, err := verifier.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}

	// A headless Chromium with a fresh profile.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()

	page := srv.URL + "/?" + url.Values{"project": {projectID.String()}, "token": {token}}.Encode()
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	if err := chromedp.Do(browser); err != nil { // starts the browser, without a timeout
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(browser, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(page),
		chromedp.WaitVisible(css(`#submit`)),
		chromedp.SetValue(css(`#type`), "build"),
		chromedp.SendKeys(css(`#prompt`), "write a.txt and src/b.txt, then move b.txt to lib/"),
		chromedp.Click(css(`#submit`)),
		chromedp.WaitVisible(css(`#tree li.file-node[data-path="a.txt"]`)),
		chromedp.WaitVisible(css(`#tree li.file-node[data-path="src/b.txt"]`)),
		chromedp.Click(css(`#tree li.file-node[data-path="src/b.txt"]`)),
		chromedp.WaitVisible(css(`#tree li.file-node.selected[data-path="src/b.txt"]`)),
	); err != nil {
		t.Fatalf("submit and see the files: %v", err)
	}
	// A network drop while the task runs: EventSource resumes with
	// Last-Event-ID and the page must apply every event once.
	srv.CloseClientConnections()
	openGate() // now the model moves src/b.txt
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(css(`#tree li.file-node.selected[data-path="lib/b.txt"]`)),
		chromedp.WaitVisible(css(`body[data-status="completed"]`)),
	); err != nil {
		t.Fatalf("watch the move and the end: %v", err)
	}
	type pageState struct {
		StagesDone int    `json:"stagesDone"`
		Duplicates string `json:"duplicates"`
		Applied    string `json:"applied"`
		LastSeq    string `json:"lastSeq"`
		OldGone    bool   `json:"oldGone"`
		Selected   string `json:"selected"`
	}
	state, err := chromedp.Run(ctx, chromedp.Evaluate[pageState](`({
		stagesDone: document.querySelectorAll('#stages li.done').length,
		duplicates: document.body.dataset.duplicates || "0",
		applied: document.body.dataset.applied,
		lastSeq: document.body.dataset.lastSeq,
		oldGone: !document.querySelector('#tree li.file-node[data-path="src/b.txt"]'),
		selected: document.getElementById('selected').textContent,
	})`))
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	if state.StagesDone != 7 || !state.OldGone || state.Selected != "lib/b.txt" {
		t.Errorf("stages done %d/7, src/b.txt gone %v, selected %q", state.StagesDone, state.OldGone, state.Selected)
	}
	var taskLastSeq string
	if err := pool.QueryRow(t.Context(), `SELECT last_seq::text FROM ai_tasks WHERE project_id = $1`, projectID).Scan(&taskLastSeq); err != nil {
		t.Fatal(err)
	}
	if state.Duplicates != "0" || state.Applied != state.LastSeq || state.LastSeq != taskLastSeq {
		t.Errorf("after a drop the page applied %s events up to seq %s with %s duplicates; the task has %s",
			state.Applied, state.LastSeq, state.Duplicates, taskLastSeq)
	}

	// The 100-event window in the page's own module: a move's halves stay
	// together, and the latest move survives.
	type window struct {
		Kept       int      `json:"kept"`
		MoveHalves []string `json:"moveHalves"`
	}
	w, err := chromedp.Run(ctx, chromedp.Evaluate[window](`import("/state.js").then(({ Timeline }) => {
		const t = new Timeline(100);
		let seq = 0;
		const add = (type, payload) => t.add({ seq: ++seq, task_id: "t", type, payload });
		add("tool_call", { toolName: "move_file", success: true, fromPath: "a", toPath: "b" });
		add("file_update", { op: "move", path: "b", fromPath: "a", toPath: "b" });
		for (let i = 0; i < 250; i++) add("log", { level: "info", message: "x" + i });
		return { kept: t.events.length, moveHalves: t.events.filter(e => e.type !== "log").map(e => e.type) };
	})`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate the event window: %v", err)
	}
	if w.Kept != 100 || len(w.MoveHalves) != 2 {
		t.Errorf("event window kept %d events with move halves %v, want 100 with both halves", w.Kept, w.MoveHalves)
	}

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shotPath := filepath.Join(dir, "activity-timeline.png")
	if err := os.WriteFile(shotPath, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shotPath)

	// The files are really in MinIO where the tree says.
	if data, _, err := store.Read(t.Context(), projectID.String(), "lib/b.txt"); err != nil || string(data) != "beta\n" {
		t.Errorf("lib/b.txt in MinIO = %q, %v", data, err)
	}
}
