package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/kelseyhightower/envconfig"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/redact"
	"github.com/agentworker/agentworker/sandbox"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/traceid"
)

// config is the process configuration, read from the environment only.
// Every field's desc tag is its documentation: `agentworker help` prints
// them and docs/configuration.md is generated from them (TestConfigDocs).
type config struct {
	DatabaseURL string `envconfig:"DATABASE_URL" desc:"PostgreSQL connection string; required by serve, migrate, submit and follow (demo and bench start a private PostgreSQL without it)"`

	S3Endpoint  string        `envconfig:"S3_ENDPOINT" desc:"S3/MinIO endpoint (host:port); when set, project files live in S3"`
	S3AccessKey string        `envconfig:"S3_ACCESS_KEY" desc:"S3 access key (required with S3_ENDPOINT)"`
	S3SecretKey string        `envconfig:"S3_SECRET_KEY" desc:"S3 secret key (required with S3_ENDPOINT); never logged"`
	S3Bucket    string        `envconfig:"S3_BUCKET" default:"agentworker" desc:"bucket of the project files; created if missing"`
	S3UseSSL    bool          `envconfig:"S3_USE_SSL" default:"false" desc:"HTTPS to the S3 endpoint"`
	S3RetryFor  time.Duration `envconfig:"S3_RETRY_FOR" default:"20s" desc:"how long a storage call retries an S3 endpoint it cannot reach (refused connections, timeouts, 5xx, throttling) before the task is handed back and retried; the model never sees an outage"`
	StorageDir  string        `envconfig:"STORAGE_DIR" desc:"local-directory store, used when S3_ENDPOINT is not set (data when empty)"`
	// ArchivePrefix must start with "_", which no project id may: no
	// project path names an archive (storage.CheckServiceKey).
	ArchivePrefix string `envconfig:"ARCHIVE_PREFIX" default:"_archive/" desc:"key prefix, in S3_BUCKET, of finished tasks' archived timelines (one gzip JSONL object a task, <prefix><project_id>/<task_id>.jsonl.gz), read back transparently by the event stream, follow and the console once their rows are dropped; must start with _ and end with /, outside every project's files and never visible to the agent. Needs S3_ENDPOINT"`

	OpenAIBaseURL string `envconfig:"OPENAI_BASE_URL" desc:"any OpenAI-compatible Chat Completions endpoint (OpenAI's when empty)"`
	OpenAIAPIKey  string `envconfig:"OPENAI_API_KEY" desc:"API key of the endpoint; never logged. With neither this nor OPENAI_BASE_URL, serve and demo use the bundled scripted demo model (no real LLM) and say so"`
	LLMModel      string `envconfig:"LLM_MODEL" default:"gpt-4o-mini" desc:"model name sent to the endpoint"`
	ImageModel    string `envconfig:"LLM_IMAGE_MODEL" default:"gpt-image-1" desc:"model of the generate_image tool (Images API at the same endpoint)"`

	LLMRateLimitMaxWait time.Duration `envconfig:"LLM_RATE_LIMIT_MAX_WAIT" default:"30m" desc:"how long one model call may wait, in all, for the provider's rate limit (its pace, a 429's or 503's Retry-After, x-ratelimit-reset-*) before the task's attempt is handed back as llm_rate_limited; such waits spend none of the task's attempts"`
	LLMMaxRPM           float64       `envconfig:"LLM_MAX_RPM" default:"0" desc:"cap of the requests per minute to the endpoint and model, all replicas together (0: what the provider's x-ratelimit headers say, or what its refusals show)"`
	LLMMaxTPM           float64       `envconfig:"LLM_MAX_TPM" default:"0" desc:"cap of the tokens per minute to the endpoint and model, all replicas together (0: what the provider's x-ratelimit headers say, else none)"`

	WorkerConcurrency       int           `envconfig:"WORKER_CONCURRENCY" default:"200" desc:"tasks this process runs at once; an agent task mostly waits on its model, so hundreds fit (the database pool is sized from it and kept open: 10 + 1 per 20 tasks, at most 50 connections)"`
	WorkerActiveLimit       int           `envconfig:"WORKER_ACTIVE_LIMIT" default:"0" desc:"how many of those tasks work at once rather than wait: a task gives up its turn while it waits on its model, a tool or a check, so a burst of answers is worked first come, first done (0: 2 per CPU Go may use; raise it when storage is far away)"`
	WorkerProjectMaxRunning int           `envconfig:"WORKER_PROJECT_MAX_RUNNING" default:"0" desc:"most tasks of one project running at once, all replicas together, about (checked as a task starts, not under a lock): a task over it waits 5-6 s and tries again, so a project's backlog leaves the other slots to other projects (0: no cap)"`
	MaxIterations           int           `envconfig:"MAX_ITERATIONS" default:"25" desc:"iteration budget and its ceiling: model calls per task before it pauses for a person (input.budget.max_iterations may lower it, never raise it)"`
	BudgetMaxTokens         int64         `envconfig:"BUDGET_MAX_TOKENS" default:"0" desc:"token budget of a task and its ceiling, all attempts (0: none; input.budget.max_tokens may lower it, or set one where this is 0)"`
	BudgetMaxCostUSD        float64       `envconfig:"BUDGET_MAX_COST_USD" default:"0" desc:"cost budget of a task in US dollars and its ceiling, priced with LLM_PRICES (0: none; input.budget.max_cost_usd may lower it, or set one where this is 0)"`
	ProjectMaxCostPerDay    float64       `envconfig:"PROJECT_MAX_COST_USD_PER_DAY" default:"0" desc:"daily cost cap of a project in US dollars, its tasks together on every replica, priced with LLM_PRICES and counted by UTC day; a project's owner may set its own (PATCH /v1/projects/{id}/settings). Checked before each model call: at the cap, tasks pause with a budget_exceeded inbox item and resume when the cap is raised or the UTC day turns; each running task may overshoot it by the one call it had in flight (0: none)"`
	LLMPrices               string        `envconfig:"LLM_PRICES" desc:"model=in_per_1k:out_per_1k,... in dollars per 1,000 tokens, over the built-in list prices (gpt-4o, gpt-4o-mini, gpt-4.1, gpt-4.1-mini, gpt-4.1-nano, o3, o4-mini); a model not listed is refused where it is named (an agent's model: 400 MODEL_UNPRICED; a task of such an agent, even one inserted by SQL, fails model_unpriced before calling it) and LLM_MODEL must be listed; 0:0 prices a self-hosted model"`
	TaskLease               time.Duration `envconfig:"TASK_LEASE" default:"30s" desc:"lease of a running task, renewed every TASK_LEASE/3; a task whose lease lapsed is taken over by another replica"`
	TasksMDPath             string        `envconfig:"TASKS_MD_PATH" default:"tasks.md" desc:"path, in each project's files, of the task list the service keeps (counts by status, each task with its agent, priority and dependencies), rewritten about a second after a status change; the tools may read it, never change it; every task's context holds it, the first thing trimmed when over CONTEXT_BUDGET_BYTES (empty: off)"`
	RulesFallbacks          []string      `envconfig:"RULES_FALLBACKS" default:"CLAUDE.md" desc:"rules file names looked for in a folder after AGENTS.override.md and AGENTS.md, comma separated, first found wins (empty: none); the root's rules are in every task's system prompt, a folder's come with the first tool result under it, 32 KiB of rules a task"`
	ContextBudget           int           `envconfig:"CONTEXT_BUDGET_BYTES" default:"49152" desc:"bytes of a task's context in its system prompt, besides the file summary and the rules (which have their own 32 KiB): the tasks view (TASKS_MD_PATH), the project's documents (mandatory ones inlined, the others listed) and the dependencies' results together; when over, trimmed in that order (the tasks view, then documents: mandatory ones listed instead of inlined, then list lines; then dependency summaries; then a hard cut), at least 1024"`
	EventsRetention         retention     `envconfig:"EVENTS_RETENTION" default:"30d" desc:"events older than this (30d, 720h) are dropped a UTC day at a time, once every task with events in that day is finished; keep or 0: never. River's leader checks every 10 minutes"`
	TasksRetention          retention     `envconfig:"TASKS_RETENTION" default:"keep" desc:"finished tasks that finished longer ago than this (e.g. 90d) are deleted with their runs, events, change sets and inbox items, in batches of 500 by River's leader; what they spent stays in the usage views; keep or 0: never"`
	AuditRetention          retention     `envconfig:"AUDIT_RETENTION" default:"90d" desc:"audit_log rows (refused API requests) older than this are deleted by River's leader, in batches of 500; keep or 0: never"`
	StuckIdleTimeout        time.Duration `envconfig:"STUCK_IDLE_TIMEOUT" default:"10m" desc:"a running task whose timeline has not moved for this long gets an alert event and an inbox item"`
	HTTPAddr                string        `envconfig:"HTTP_ADDR" default:":8080" desc:"address of health, metrics, the /v1 API (SSE, task control) and the page at /"`
	HTTPReadTimeout         time.Duration `envconfig:"HTTP_READ_TIMEOUT" default:"30s" desc:"a request's headers and body must arrive within it, else its connection is closed (an event stream is exempt once it starts); headers alone within 10s"`
	HTTPWriteTimeout        time.Duration `envconfig:"HTTP_WRITE_TIMEOUT" default:"60s" desc:"an answer must be written within it (an event stream is exempt)"`
	HTTPIdleTimeout         time.Duration `envconfig:"HTTP_IDLE_TIMEOUT" default:"60s" desc:"a keep-alive connection without a request for this long is closed"`
	JWTSecret               string        `envconfig:"JWT_SECRET" desc:"HS256 secret (at least 16 bytes) of the bearer tokens; unset, the /v1 API answers 503"`
	JWTMaxTTL               time.Duration `envconfig:"JWT_MAX_TTL" default:"24h" desc:"longest a project token may live: one whose exp is further from now, or from its iat, is refused (401)"`
	JWTServiceMaxTTL        time.Duration `envconfig:"JWT_SERVICE_MAX_TTL" default:"24h" desc:"the same for service_role tokens; the backends holding JWT_SECRET mint them as they need them, so keep it short"`
	CORSOrigins             []string      `envconfig:"CORS_ALLOWED_ORIGINS" desc:"comma-separated origins allowed to call /v1 from a browser (* for any); the page at / needs none"`
	SSEHeartbeat            time.Duration `envconfig:"SSE_HEARTBEAT" default:"15s" desc:"interval of the comment lines that keep idle event streams alive"`
	SSEMaxStreams           int           `envconfig:"SSE_MAX_STREAMS" default:"1000" desc:"event streams this process holds open at once; past it a new one is answered 429 with Retry-After"`
	SSEMaxPerToken          int           `envconfig:"SSE_MAX_STREAMS_PER_TOKEN" default:"20" desc:"event streams one token may hold open at once (a console tab holds two); past it, 429"`
	AuditRefusalsPerMinute  int           `envconfig:"AUDIT_REFUSALS_PER_MINUTE" default:"10" desc:"refused API requests (401, 403, illegal transitions) of one actor recorded in audit_log a minute, per process; the rest are counted in the actor's next record (an anonymous caller is counted per remote address)"`
	MetricsToken            string        `envconfig:"METRICS_TOKEN" desc:"when set, /metrics wants it as a bearer token (Authorization: Bearer …); unset, /metrics is open"`
	RunCommand              string        `envconfig:"RUN_COMMAND" default:"sandbox" desc:"sandbox: build tasks get run_command (npm scripts in bubblewrap, no network) and run the project's checks before finish; off: no commands. If the sandbox cannot start, commands are off and serve logs why — never unsandboxed"`
	RunConcurrency          int           `envconfig:"RUN_COMMAND_CONCURRENCY" default:"2" desc:"commands this process runs at once"`
	RunMaxTimeout           time.Duration `envconfig:"RUN_COMMAND_MAX_TIMEOUT" default:"2m" desc:"cap of a command's timeout (a call's own default is 30s); the whole process group is killed at the timeout"`
	RunMaxOutput            int           `envconfig:"RUN_COMMAND_MAX_OUTPUT" default:"1048576" desc:"bytes of a command's output kept (the model sees head and tail)"`
	RunDir                  string        `envconfig:"RUN_COMMAND_DIR" desc:"where per-task workspaces and the dependency cache live (under the temporary directory when empty); must be reachable by user nobody"`
	RunAllowUncapped        bool          `envconfig:"RUN_COMMAND_ALLOW_UNCAPPED" default:"false" desc:"true: run commands even where no cgroup can cap each sandbox's memory (no swap) and processes as a whole (the worker needs a cgroup it may divide: root with cgroups writable, or a delegated cgroup v2 with the memory and pids controllers); only the per-process rlimits hold then, and shared memory escapes them. false: commands are off there, and /readyz says why"`
	RunChecks               string        `envconfig:"RUN_COMMAND_CHECKS" default:"typecheck,lint,test" desc:"npm scripts a build runs before finish when the project has them (comma-separated; empty: none)"`
	LogLevel                string        `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
	LogFormat               string        `envconfig:"LOG_FORMAT" default:"text" desc:"text or json (log/slog)"`
}

// loadConfig reads and validates the environment. A malformed value gets
// one error naming the variable (never echoing a secret's value).
func loadConfig() (config, error) {
	var c config
	if err := envconfig.Process("", &c); err != nil {
		var pe *envconfig.ParseError
		if errors.As(err, &pe) {
			return c, fmt.Errorf("config: %s: invalid %s value %q", pe.KeyName, pe.TypeName, pe.Value)
		}
		return c, fmt.Errorf("config: %w", err)
	}
	switch {
	case c.WorkerConcurrency < 1:
		return c, fmt.Errorf("config: WORKER_CONCURRENCY must be at least 1, got %d", c.WorkerConcurrency)
	case c.WorkerActiveLimit < 0:
		return c, fmt.Errorf("config: WORKER_ACTIVE_LIMIT must be 0 (2 per CPU) or more, got %d", c.WorkerActiveLimit)
	case c.WorkerProjectMaxRunning < 0:
		return c, fmt.Errorf("config: WORKER_PROJECT_MAX_RUNNING must be 0 (no cap) or more, got %d", c.WorkerProjectMaxRunning)
	case c.MaxIterations < 1:
		return c, fmt.Errorf("config: MAX_ITERATIONS must be at least 1, got %d", c.MaxIterations)
	case c.BudgetMaxTokens < 0 || c.BudgetMaxCostUSD < 0 || c.ProjectMaxCostPerDay < 0:
		return c, errors.New("config: BUDGET_MAX_TOKENS, BUDGET_MAX_COST_USD and PROJECT_MAX_COST_USD_PER_DAY must not be negative")
	case c.LLMRateLimitMaxWait <= 0:
		return c, fmt.Errorf("config: LLM_RATE_LIMIT_MAX_WAIT must be positive, got %s", c.LLMRateLimitMaxWait)
	case c.LLMMaxRPM < 0 || c.LLMMaxTPM < 0:
		return c, errors.New("config: LLM_MAX_RPM and LLM_MAX_TPM must not be negative")
	case c.TaskLease <= 0:
		return c, fmt.Errorf("config: TASK_LEASE must be positive, got %s", c.TaskLease)
	case c.HTTPReadTimeout <= 0 || c.HTTPWriteTimeout <= 0 || c.HTTPIdleTimeout <= 0:
		return c, errors.New("config: HTTP_READ_TIMEOUT, HTTP_WRITE_TIMEOUT and HTTP_IDLE_TIMEOUT must be positive")
	case c.JWTMaxTTL <= 0 || c.JWTServiceMaxTTL <= 0:
		return c, errors.New("config: JWT_MAX_TTL and JWT_SERVICE_MAX_TTL must be positive")
	case c.SSEMaxStreams < 1 || c.SSEMaxPerToken < 1:
		return c, errors.New("config: SSE_MAX_STREAMS and SSE_MAX_STREAMS_PER_TOKEN must be at least 1")
	case c.AuditRefusalsPerMinute < 1:
		return c, fmt.Errorf("config: AUDIT_REFUSALS_PER_MINUTE must be at least 1, got %d", c.AuditRefusalsPerMinute)
	case c.SSEHeartbeat <= 0:
		return c, fmt.Errorf("config: SSE_HEARTBEAT must be positive, got %s", c.SSEHeartbeat)
	case c.ContextBudget < 1024:
		return c, fmt.Errorf("config: CONTEXT_BUDGET_BYTES must be at least 1024, got %d", c.ContextBudget)
	case c.StuckIdleTimeout <= 0:
		return c, fmt.Errorf("config: STUCK_IDLE_TIMEOUT must be positive, got %s", c.StuckIdleTimeout)
	case c.LogFormat != "text" && c.LogFormat != "json":
		return c, fmt.Errorf("config: LOG_FORMAT must be text or json, got %q", c.LogFormat)
	case c.RunCommand != "off" && c.RunCommand != "sandbox":
		return c, fmt.Errorf("config: RUN_COMMAND must be off or sandbox, got %q", c.RunCommand)
	case c.RunConcurrency < 1:
		return c, fmt.Errorf("config: RUN_COMMAND_CONCURRENCY must be at least 1, got %d", c.RunConcurrency)
	case c.RunMaxTimeout < time.Second:
		return c, fmt.Errorf("config: RUN_COMMAND_MAX_TIMEOUT must be at least 1s, got %s", c.RunMaxTimeout)
	case c.RunMaxOutput < 16<<10:
		return c, fmt.Errorf("config: RUN_COMMAND_MAX_OUTPUT must be at least 16384 bytes, got %d", c.RunMaxOutput)
	case c.S3Endpoint != "" && (c.S3AccessKey == "" || c.S3SecretKey == ""):
		return c, errors.New("config: S3_ACCESS_KEY and S3_SECRET_KEY are required when S3_ENDPOINT is set")
	}
	if err := storage.CheckServiceKey(c.ArchivePrefix); err != nil || !strings.HasSuffix(c.ArchivePrefix, "/") {
		return c, fmt.Errorf("config: ARCHIVE_PREFIX %q must start with _ and end with / (outside every project's files)", c.ArchivePrefix)
	}
	if c.TasksMDPath != "" {
		clean, err := storage.CleanPath(c.TasksMDPath)
		if err == nil {
			err = storage.CheckSensitive(clean)
		}
		if err != nil {
			return c, fmt.Errorf("config: TASKS_MD_PATH %q: %w", c.TasksMDPath, err)
		}
		c.TasksMDPath = clean
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return c, err
	}
	prices, err := c.prices()
	if err != nil {
		return c, err
	}
	// The worker's own model is priced too, or no cost budget would stop
	// the tasks that use it (the demo model prices itself at 0).
	if c.llmConfigured() {
		if err := prices.Check(c.LLMModel); err != nil {
			return c, fmt.Errorf("config: LLM_MODEL: %w", err)
		}
	}
	return c, nil
}

// prices is the model price table: llm.DefaultPrices with LLM_PRICES over it.
func (c config) prices() (llm.Prices, error) {
	p, err := llm.ParsePrices(c.LLMPrices, llm.DefaultPrices())
	if err != nil {
		return nil, fmt.Errorf("config: LLM_PRICES: %w", err)
	}
	return p, nil
}

// projectChecks is RUN_COMMAND_CHECKS as the runner takes it: the scripts
// a build runs before it may finish; "none" (or nothing) for none.
func (c config) projectChecks() []string {
	checks := []string{}
	for _, s := range strings.Split(c.RunChecks, ",") {
		if s = strings.TrimSpace(s); s != "" && s != "none" {
			checks = append(checks, s)
		}
	}
	return checks
}

// sandbox starts the sandbox of run_command, or returns nil when
// RUN_COMMAND is off or the sandbox cannot start here, saying why: a
// command never runs unsandboxed. commands says which, for /readyz: "on",
// or "off" and why.
func (c config) sandbox(ctx context.Context, log *slog.Logger) (sb *sandbox.Sandbox, commands string) {
	if c.RunCommand == "off" {
		log.InfoContext(ctx, "run_command is off (RUN_COMMAND=off): builds cannot run the project's checks")
		return nil, "off (RUN_COMMAND=off)"
	}
	sb, err := sandbox.New(ctx, sandbox.Config{Dir: c.RunDir, Concurrency: c.RunConcurrency, MaxTimeout: c.RunMaxTimeout,
		MaxOutputBytes: c.RunMaxOutput, AllowUncapped: c.RunAllowUncapped, Logger: log})
	if err != nil {
		reason := err.Error()
		if errors.Is(err, sandbox.ErrUncapped) {
			reason += " (RUN_COMMAND_ALLOW_UNCAPPED=true)"
		}
		log.WarnContext(ctx, "run_command is off: the sandbox cannot start on this host", slog.String("reason", reason))
		return nil, "off: the sandbox cannot start on this host: " + reason
	}
	log.InfoContext(ctx, "run_command is on: builds run the project's npm scripts in a bubblewrap sandbox",
		slog.Int("concurrency", c.RunConcurrency), slog.Any("checks_before_finish", c.projectChecks()), slog.String("limits", sb.Limits()))
	return sb, "on"
}

// readiness is what /readyz says of commands: whether run_command is on,
// and the limits of its sandboxes when it is.
func readiness(sb *sandbox.Sandbox, commands string) string {
	if sb == nil {
		return "run_command: " + commands
	}
	return "run_command: " + commands + "\nsandbox_limits: " + sb.Limits()
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return l, fmt.Errorf("config: LOG_LEVEL must be debug, info, warn or error, got %q", s)
	}
	return l, nil
}

// logger writes to stderr through the redacting handler, which also masks
// the configured secrets by value.
func (c config) logger() *slog.Logger {
	return c.loggerTo(os.Stderr)
}

// loggerTo is logger writing to w.
func (c config) loggerTo(w io.Writer) *slog.Logger {
	level, _ := parseLevel(c.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if c.LogFormat == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	// A line logged with a request's or a task's context names its trace.
	return slog.New(redact.NewHandler(traceid.NewHandler(h), c.redactor()))
}

// redactor masks the configured secrets by value, besides redact's patterns.
func (c config) redactor() *redact.Redactor {
	secrets := []string{c.OpenAIAPIKey, c.S3SecretKey, c.JWTSecret, c.MetricsToken}
	if c.DatabaseURL != "" {
		if pc, err := pgconn.ParseConfig(c.DatabaseURL); err == nil {
			secrets = append(secrets, pc.Password)
		}
	}
	return redact.New(secrets...)
}

// llmConfigured reports whether a real model endpoint is configured.
func (c config) llmConfigured() bool {
	return c.OpenAIBaseURL != "" || c.OpenAIAPIKey != ""
}

// configUsage prints every variable with its default and description, as
// envconfig reads them.
func configUsage(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	err := envconfig.Usagef("", &config{}, tw, "VARIABLE\tDEFAULT\tMEANING\n{{range .}}{{usage_key .}}\t{{usage_default .}}\t{{usage_description .}}\n{{end}}")
	if err != nil {
		return fmt.Errorf("config usage: %w", err)
	}
	return tw.Flush()
}

// configMarkdown renders the configuration reference (docs/configuration.md)
// from the same tags.
func configMarkdown(w io.Writer) error {
	const tmpl = "# Configuration\n\n" +
		"Environment variables only, read with envconfig; a malformed value fails start-up with one\n" +
		"error naming the variable. `agentworker help` prints this table. Generated from the `desc` tags\n" +
		"of the config struct (cmd/agentworker/config.go) by `go test ./cmd/agentworker -run TestConfigDocs -update`.\n\n" +
		"| variable | default | meaning |\n|---|---|---|\n" +
		"{{range .}}| `{{usage_key .}}` | {{with usage_default .}}`{{.}}`{{else}}—{{end}} | {{usage_description .}} |\n{{end}}"
	return envconfig.Usagef("", &config{}, w, tmpl)
}
