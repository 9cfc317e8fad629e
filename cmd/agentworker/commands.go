package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/api"
	"github.com/agentworker/agentworker/archive"
	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/console"
	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/events/sse"
	"github.com/agentworker/agentworker/handlers"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/metrics"
	"github.com/agentworker/agentworker/sandbox"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/tracing"
	"github.com/agentworker/agentworker/worker"
)

const shutdownTimeout = 30 * time.Second

// Pools: a one-shot command's, or a worker's (sized for its tasks, kept open).
const (
	oneShot   = false
	runsTasks = true
)

func connect(ctx context.Context, cfg config, worksTasks bool) (*pgxpool.Pool, error) {
	if cfg.DatabaseURL == "" {
		return nil, errors.New("DATABASE_URL is not set (agentworker demo runs without one, on an embedded Postgres)")
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		// pgx's parse errors can quote the URL, password included.
		return nil, errors.New("DATABASE_URL is not a valid PostgreSQL connection string")
	}
	if worksTasks {
		worker.SizePool(pcfg, cfg.WorkerConcurrency)
	} else {
		pcfg.MaxConns = worker.PoolSize(cfg.WorkerConcurrency)
	}
	agentsql.ConfigurePool(pcfg)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database %s: %w", pcfg.ConnConfig.Host, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database at %s:%d: %w", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, err)
	}
	return pool, nil
}

// store is the file store with its readiness check.
type store interface {
	storage.Store
	Ping(ctx context.Context) error
}

func openStore(ctx context.Context, cfg config, log *slog.Logger) (store, error) {
	if cfg.S3Endpoint != "" {
		s, err := storage.NewS3(ctx, storage.S3Config{
			Endpoint: cfg.S3Endpoint, AccessKey: cfg.S3AccessKey, SecretKey: cfg.S3SecretKey,
			Bucket: cfg.S3Bucket, UseSSL: cfg.S3UseSSL, RetryFor: cfg.S3RetryFor,
		})
		if err != nil {
			return nil, err
		}
		log.Info("file store: S3", slog.String("endpoint", cfg.S3Endpoint), slog.String("bucket", cfg.S3Bucket))
		return s, nil
	}
	dir := cfg.StorageDir
	if dir == "" {
		dir = "data"
	}
	s, err := storage.NewLocal(dir)
	if err != nil {
		return nil, err
	}
	log.Info("file store: local directory", slog.String("dir", dir))
	return s, nil
}

// openArchive is the events archive in the S3 store st, or nil when
// project files are in a local directory (no archive: retention must keep
// the rows).
func openArchive(cfg config, log *slog.Logger, pool *pgxpool.Pool, st storage.Store) (*archive.Archiver, error) {
	s3, ok := st.(*storage.S3)
	if !ok {
		return nil, nil
	}
	return archive.New(pool, s3, archive.Config{Prefix: cfg.ArchivePrefix, Logger: log})
}

// archivedRetention is r with the archive in front of every drop and
// delete: a day of events is archived before it is dropped, a task's
// archive deleted before the task. Without an archive (project files in a
// local directory) events are kept whatever EVENTS_RETENTION says, so
// none is lost; only an EVENTS_RETENTION the operator set (set) is worth
// a warning, not the default.
func archivedRetention(r worker.RetentionConfig, arch *archive.Archiver, log *slog.Logger, set bool) worker.RetentionConfig {
	if arch == nil {
		if r.Events > 0 && set {
			log.Warn("EVENTS_RETENTION is ignored: events are archived before they are dropped, and the archive needs S3 storage")
		}
		r.Events = 0
		return r
	}
	r.BeforeDrop, r.BeforeDelete = arch.ArchiveTasks, arch.DeleteArchives
	return r
}

// readsArchive is a as what the event readers take: none when a is nil.
func readsArchive(a *archive.Archiver) events.Archive {
	if a == nil {
		return nil
	}
	return a
}

// newLLM is the model client. Its pace per endpoint and model is shared
// with the other replicas through pool (when not nil), and its waits,
// refusals and pace go to m (when not nil).
func newLLM(cfg config, log *slog.Logger, pool *pgxpool.Pool, m *metrics.Metrics) (*llm.Client, error) {
	if !cfg.llmConfigured() {
		return nil, errors.New("no model endpoint: set OPENAI_API_KEY (and OPENAI_BASE_URL for another OpenAI-compatible endpoint)")
	}
	rl := llm.RateLimitConfig{MaxWait: cfg.LLMRateLimitMaxWait, MaxRPM: cfg.LLMMaxRPM, MaxTPM: cfg.LLMMaxTPM}
	if pool != nil {
		rl.Share = &agentsql.ProviderBudget{DB: pool, Replica: uuid.NewString()}
	}
	if m != nil {
		rl.Observer = m
	}
	return llm.New(llm.Config{BaseURL: cfg.OpenAIBaseURL, APIKey: cfg.OpenAIAPIKey, Model: cfg.LLMModel, ImageModel: cfg.ImageModel,
		MaxIdleConns: cfg.WorkerConcurrency, Logger: log, RateLimit: rl})
}

// startWorker wires the runner and the River service and starts it.
// m, when not nil, receives the loop's events and the runs' durations.
// sb, when not nil, runs run_command and the checks before finish.
// arch, when not nil, takes each finished task's events before retention
// drops or deletes them. tel, when not nil, exports the attempts' spans.
func startWorker(ctx context.Context, cfg config, log *slog.Logger, pool *pgxpool.Pool, st storage.Store, arch *archive.Archiver, model *llm.Client, m *metrics.Metrics, sb *sandbox.Sandbox, tel *tracing.Telemetry) (*worker.Service, error) {
	// One announcer per process: tasks' transactions never NOTIFY.
	ann := events.NewAnnouncer(pool, log)
	// The tasks and the tasks.md job write through one ListCache, so the
	// tasks' searches see tasks.md's writes at once.
	st = storage.NewListCache(st, storage.ListCacheConfig{})
	deps := handlers.Deps{Pool: pool, Store: st, LLM: model, Logger: log, Announcer: ann, Sandbox: sb}
	wcfg := worker.Config{Concurrency: cfg.WorkerConcurrency, ActiveLimit: cfg.WorkerActiveLimit, ProjectMaxRunning: cfg.WorkerProjectMaxRunning, Lease: cfg.TaskLease, StuckIdleTimeout: cfg.StuckIdleTimeout, Logger: log, Announcer: ann,
		ProjectMaxCostUSDPerDay: cfg.ProjectMaxCostPerDay, Tracing: tel,
		TasksMD: worker.TasksMDConfig{Store: st, Path: cfg.TasksMDPath},
		Retention: worker.RetentionConfig{Events: time.Duration(cfg.EventsRetention), Tasks: time.Duration(cfg.TasksRetention),
			Audit: time.Duration(cfg.AuditRetention)}}
	// Set by the operator, not its default (the config holds only the value).
	_, retentionSet := os.LookupEnv("EVENTS_RETENTION")
	wcfg.Retention = archivedRetention(wcfg.Retention, arch, log, retentionSet)
	var reserved []string
	if cfg.TasksMDPath != "" {
		reserved = []string{cfg.TasksMDPath}
	}
	if m != nil {
		deps.Observer, wcfg.Runs = m, m
	}
	prices, err := cfg.prices()
	if err != nil {
		return nil, err
	}
	runner, err := handlers.NewRunner(deps, handlers.Config{MaxIterations: cfg.MaxIterations, Prices: prices,
		Budget: handlers.Budget{MaxTokens: cfg.BudgetMaxTokens, MaxCostUSD: cfg.BudgetMaxCostUSD}, ProjectMaxCostUSDPerDay: cfg.ProjectMaxCostPerDay, ProjectChecks: cfg.projectChecks(), ReservedPaths: reserved,
		RuleFallbacks: append([]string{}, cfg.RulesFallbacks...), ContextBudget: cfg.ContextBudget, TasksView: cfg.TasksMDPath})
	if err != nil {
		return nil, err
	}
	svc, err := worker.New(pool, runner.Handlers(), wcfg)
	if err != nil {
		return nil, err
	}
	if err := svc.Start(ctx); err != nil {
		return nil, err
	}
	return svc, nil
}

func serve(ctx context.Context, cfg config) error {
	log := cfg.logger()
	pool, err := connect(ctx, cfg, runsTasks)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := agentsql.MigrateWithResult(ctx, pool, log); err != nil {
		return err
	}
	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	if !cfg.llmConfigured() {
		stopModel, err := startDemoModel(&cfg, log)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		defer stopModel()
		log.Warn("model: "+demoModelNotice, slog.String("model", cfg.LLMModel))
	}
	m, err := metrics.NewProcess(pool, log)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	model, err := newLLM(cfg, log, pool, m)
	if err != nil {
		return err
	}
	sb, commands := cfg.sandbox(ctx, log)
	arch, err := openArchive(cfg, log, pool, st)
	if err != nil {
		return err
	}
	tel, err := tracing.FromEnv(ctx, log)
	if err != nil {
		return err
	}
	if tel != nil {
		log.Info("tracing: exporting spans and metrics over OTLP", slog.String("endpoint", otlpEndpoint()))
		defer func() {
			// After the worker and the server stopped: their last spans go too.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := tel.Shutdown(sctx); err != nil {
				log.Warn("tracing: flush on shutdown", slog.String("err", err.Error()))
			}
		}()
	}
	svc, err := startWorker(ctx, cfg, log, pool, st, arch, model, m, sb, tel)
	if err != nil {
		return err
	}
	handler, err := httpHandler(ctx, cfg, log, pool, st, readsArchive(arch), m, readiness(sb, commands), tel)
	if err != nil {
		return err
	}
	srv := newHTTPServer(ctx, cfg, handler)
	httpErr := make(chan error, 1)
	go func() { httpErr <- srv.ListenAndServe() }()
	log.Info("agentworker serving", slog.String("http_addr", cfg.HTTPAddr), slog.Int("concurrency", cfg.WorkerConcurrency))

	select {
	case <-ctx.Done():
	case err := <-httpErr:
		log.Error("http server stopped", slog.String("err", err.Error()))
	}
	log.Info("shutting down: finishing running tasks", slog.Duration("timeout", shutdownTimeout))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	// The worker stops taking tasks first, so that none inserted from now
	// on starts here while the HTTP server closes; both then drain together.
	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		_ = srv.Shutdown(sctx)
	}()
	stopErr := svc.Stop(sctx)
	<-httpDone
	return stopErr
}

// newHTTPServer bounds every connection: headers within 10 s, the whole
// request within HTTP_READ_TIMEOUT, the answer within HTTP_WRITE_TIMEOUT,
// an idle keep-alive connection closed after HTTP_IDLE_TIMEOUT. An event
// stream clears its own deadlines once it starts; it ends with ctx.
func newHTTPServer(ctx context.Context, cfg config, handler http.Handler) *http.Server {
	return &http.Server{Addr: cfg.HTTPAddr, Handler: handler, ReadHeaderTimeout: min(10*time.Second, cfg.HTTPReadTimeout),
		ReadTimeout: cfg.HTTPReadTimeout, WriteTimeout: cfg.HTTPWriteTimeout, IdleTimeout: cfg.HTTPIdleTimeout,
		MaxHeaderBytes: 64 << 10, BaseContext: func(net.Listener) context.Context { return ctx }}
}

// httpHandler is everything served on HTTP_ADDR: health, metrics, the /v1
// API (event streams, whose hub runs until ctx ends, task submission and
// control, the inbox, the console's reads) and the console page.
// commands says whether run_command is on and with which limits, for /readyz.
// tel, when not nil, makes the requests that create tasks spans.
func httpHandler(ctx context.Context, cfg config, log *slog.Logger, pool *pgxpool.Pool, st store, arch events.Archive, m *metrics.Metrics, commands string, tel *tracing.Telemetry) (http.Handler, error) {
	var verifier *auth.Verifier
	if cfg.JWTSecret == "" {
		log.Warn("JWT_SECRET is not set: every /v1 route answers 503 until it is")
	} else {
		var err error
		if verifier, err = auth.NewVerifier(cfg.JWTSecret, nil); err != nil {
			return nil, err
		}
		verifier = verifier.WithMaxTTL(cfg.JWTMaxTTL, cfg.JWTServiceMaxTTL)
	}
	hub := sse.NewHub(pool, log)
	go func() { _ = hub.Run(ctx) }()
	mux := healthMux(pool, st, commands)
	mux.Handle("GET /metrics", api.RequireToken(cfg.MetricsToken, m.Handler()))
	streams := sse.NewStreams(pool, hub, sse.Config{Heartbeat: cfg.SSEHeartbeat, Logger: log, Archive: arch})
	prices, err := cfg.prices()
	if err != nil {
		return nil, err
	}
	api.New(pool, streams, api.Config{Verifier: verifier, AllowedOrigins: cfg.CORSOrigins, Logger: log, Store: st,
		MaxStreams: cfg.SSEMaxStreams, MaxStreamsPerToken: cfg.SSEMaxPerToken, AuditPerActorPerMinute: cfg.AuditRefusalsPerMinute,
		Prices: prices, RuleFallbacks: append([]string{}, cfg.RulesFallbacks...), ProjectMaxCostUSDPerDay: cfg.ProjectMaxCostPerDay,
		Tracing: tel}).Register(mux)
	mux.Handle("GET /", console.Handler())
	return mux, nil
}

// healthMux serves /healthz and /readyz; /readyz also says whether
// run_command is on and with which limits (commands, one or more lines; a
// replica without it is still ready).
func healthMux(pool *pgxpool.Pool, st store, commands string) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			http.Error(w, "database unavailable", http.StatusServiceUnavailable)
			return
		}
		if err := st.Ping(ctx); err != nil {
			http.Error(w, "storage unavailable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ready\n%s\n", commands)
	})
	return mux
}

func migrate(ctx context.Context, cfg config, out io.Writer) error {
	pool, err := connect(ctx, cfg, oneShot)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := agentsql.MigrateWithResult(ctx, pool, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "river migrations applied: %v\nagentworker migrations applied: %v\nfunction files applied: %v\n", res.RiverVersions, res.Applied, res.Functions)
	return nil
}

func submit(ctx context.Context, cfg config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	project := fs.String("project", "", "project id (uuid); a new one when empty")
	taskType := fs.String("type", "build", "task type: chat, plan or build")
	agent := fs.String("agent", "", "the project's agent to run the task as: its name or id")
	priority := fs.Int("priority", 0, "1 (most urgent) to 4; 0 is the default, 2")
	var dependsOn []uuid.UUID
	fs.Func("depends-on", "id of a task that must succeed first (repeat, or separate with commas)", func(v string) error {
		for _, s := range strings.Split(v, ",") {
			id, err := uuid.Parse(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("%q is not a task id", s)
			}
			dependsOn = append(dependsOn, id)
		}
		return nil
	})
	var parent *uuid.UUID
	fs.Func("parent", "id of the task this one is part of", func(v string) error {
		id, err := uuid.Parse(v)
		if err != nil {
			return fmt.Errorf("%q is not a task id", v)
		}
		parent = &id
		return nil
	})
	input := fs.String("input", "", `the task's input, a JSON object: e.g. {"expand": true} for a plan, {"review": true, "budget": {"max_cost_usd": 1}, "allowed_paths": ["src/**"]} for a build`)
	doFollow := fs.Bool("follow", false, "print the task's timeline until it ends")
	if err := fs.Parse(args); err != nil {
		return err
	}
	prompt := fs.Arg(0)
	projectID := uuid.New()
	if *project != "" {
		var err error
		if projectID, err = uuid.Parse(*project); err != nil {
			return fmt.Errorf("submit: --project %q is not a uuid: %w", *project, err)
		}
	}
	var in json.RawMessage
	if *input != "" {
		in = json.RawMessage(*input)
		if !json.Valid(in) {
			return fmt.Errorf("submit: --input %q: input must be a JSON object", *input)
		}
	}
	// The API's refusals, before anything is written.
	if err := handlers.CheckTask(*taskType, *priority, in); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	pool, err := connect(ctx, cfg, oneShot)
	if err != nil {
		return err
	}
	defer pool.Close()
	nt := agentsql.NewTask{ProjectID: projectID, Type: agentsql.TaskType(*taskType), Prompt: prompt, Input: in,
		Priority: *priority, ParentTaskID: parent, DependsOn: dependsOn}
	if *agent != "" {
		id, err := agentByName(ctx, pool, projectID, *agent)
		if err != nil {
			return fmt.Errorf("submit: %w", err)
		}
		nt.AgentID = &id
	}
	task, err := agentsql.InsertTask(ctx, pool, nt)
	if rule, ok := errors.AsType[*agentsql.RuleError](err); ok {
		return fmt.Errorf("submit: %s: %s", rule.Code, rule.Message)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "task %s (project %s, %s) %s\n", task.ID, task.ProjectID, task.Type, task.Status)
	if !*doFollow {
		return nil
	}
	return printTimeline(ctx, pool, task.ID, 0, out)
}

// agentByName is the id of the project's agent named (or with id) name.
func agentByName(ctx context.Context, pool *pgxpool.Pool, projectID uuid.UUID, name string) (uuid.UUID, error) {
	agents, err := agentsql.ListAgents(ctx, pool, projectID)
	if err != nil {
		return uuid.Nil, err
	}
	for _, a := range agents {
		if a.Name == name || a.ID.String() == name {
			return a.ID, nil
		}
	}
	return uuid.Nil, fmt.Errorf("--agent %q: project %s has no agent of that name or id", name, projectID)
}

func follow(ctx context.Context, cfg config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("follow", flag.ContinueOnError)
	after := fs.Int("after", 0, "print events after this seq (resume cursor)")
	gateway := fs.String("sse", "", "follow through the SSE gateway at this base URL (e.g. http://localhost:8080) instead of the database")
	token := fs.String("token", os.Getenv("AGENTWORKER_TOKEN"), "bearer token for --sse (default $AGENTWORKER_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	id, err := uuid.Parse(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("follow: task id %q is not a uuid: %w", fs.Arg(0), err)
	}
	if *gateway != "" {
		return followSSE(ctx, strings.TrimSuffix(*gateway, "/"), *token, id, *after, out)
	}
	pool, err := connect(ctx, cfg, oneShot)
	if err != nil {
		return err
	}
	defer pool.Close()
	task, err := agentsql.GetTask(ctx, pool, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "task %s trace %s\n", task.ID, handlers.TraceID(task))
	var arch *archive.Archiver
	if cfg.S3Endpoint != "" { // an archived timeline is read back from there
		quiet := slog.New(slog.DiscardHandler)
		st, err := openStore(ctx, cfg, quiet)
		if err != nil {
			return err
		}
		if c, ok := st.(io.Closer); ok {
			defer c.Close()
		}
		if arch, err = openArchive(cfg, quiet, pool, st); err != nil {
			return err
		}
	}
	return printTimelineArchived(ctx, pool, readsArchive(arch), id, *after, out)
}

// followSSE prints a task's events from the SSE gateway, as a browser
// would receive them, reconnecting with Last-Event-ID, until its terminal event.
func followSSE(ctx context.Context, base, token string, id uuid.UUID, after int, out io.Writer) error {
	client := &sse.Client{Token: token}
	last := ""
	if after > 0 {
		last = strconv.Itoa(after)
	}
	err := client.Follow(ctx, base+"/v1/tasks/"+id.String()+"/events", last, func(m sse.Message) error {
		fmt.Fprintln(out, events.Format(m.Event))
		if events.Terminal(m.Event) {
			return events.ErrStopFollowing
		}
		return nil
	})
	if errors.Is(err, events.ErrStopFollowing) {
		return nil
	}
	return err
}

// printTimeline prints a task's events until its terminal event.
func printTimeline(ctx context.Context, pool *pgxpool.Pool, taskID uuid.UUID, after int, out io.Writer) error {
	return printTimelineArchived(ctx, pool, nil, taskID, after, out)
}

// printTimelineArchived is printTimeline reading what was archived from
// arch (nil: none).
func printTimelineArchived(ctx context.Context, pool *pgxpool.Pool, arch events.Archive, taskID uuid.UUID, after int, out io.Writer) error {
	return events.FollowArchived(ctx, pool, arch, taskID, after, func(ev events.Event) error {
		fmt.Fprintln(out, events.Format(ev))
		if events.Terminal(ev) {
			return events.ErrStopFollowing
		}
		return nil
	})
}

// otlpEndpoint is the OTLP endpoint the environment names, for the log:
// the traces' own, else the general one.
func otlpEndpoint() string {
	return cmp.Or(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
}
