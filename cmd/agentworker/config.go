package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/kelseyhightower/envconfig"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/redact"
)

// config is the process configuration, read from the environment only.
// Every variable is documented in README.md.
type config struct {
	DatabaseURL string `envconfig:"DATABASE_URL"`

	S3Endpoint  string `envconfig:"S3_ENDPOINT"`
	S3AccessKey string `envconfig:"S3_ACCESS_KEY"`
	S3SecretKey string `envconfig:"S3_SECRET_KEY"`
	S3Bucket    string `envconfig:"S3_BUCKET" default:"agentworker"`
	S3UseSSL    bool   `envconfig:"S3_USE_SSL" default:"false"`
	StorageDir  string `envconfig:"STORAGE_DIR"`

	OpenAIBaseURL string `envconfig:"OPENAI_BASE_URL"`
	OpenAIAPIKey  string `envconfig:"OPENAI_API_KEY"`
	LLMModel      string `envconfig:"LLM_MODEL" default:"gpt-4o-mini"`
	ImageModel    string `envconfig:"LLM_IMAGE_MODEL" default:"gpt-image-1"`

	WorkerConcurrency int           `envconfig:"WORKER_CONCURRENCY" default:"200"`
	MaxIterations     int           `envconfig:"MAX_ITERATIONS" default:"25"`
	BudgetMaxTokens   int64         `envconfig:"BUDGET_MAX_TOKENS" default:"0"`
	BudgetMaxCostUSD  float64       `envconfig:"BUDGET_MAX_COST_USD" default:"0"`
	LLMPrices         string        `envconfig:"LLM_PRICES"`
	TaskLease         time.Duration `envconfig:"TASK_LEASE" default:"30s"`
	StuckIdleTimeout  time.Duration `envconfig:"STUCK_IDLE_TIMEOUT" default:"10m"`
	HTTPAddr          string        `envconfig:"HTTP_ADDR" default:":8080"`
	JWTSecret         string        `envconfig:"JWT_SECRET"`
	CORSOrigins       []string      `envconfig:"CORS_ALLOWED_ORIGINS"`
	SSEHeartbeat      time.Duration `envconfig:"SSE_HEARTBEAT" default:"15s"`
	LogLevel          string        `envconfig:"LOG_LEVEL" default:"info"`
	LogFormat         string        `envconfig:"LOG_FORMAT" default:"text"`
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
	case c.MaxIterations < 1:
		return c, fmt.Errorf("config: MAX_ITERATIONS must be at least 1, got %d", c.MaxIterations)
	case c.BudgetMaxTokens < 0 || c.BudgetMaxCostUSD < 0:
		return c, errors.New("config: BUDGET_MAX_TOKENS and BUDGET_MAX_COST_USD must not be negative")
	case c.TaskLease <= 0:
		return c, fmt.Errorf("config: TASK_LEASE must be positive, got %s", c.TaskLease)
	case c.SSEHeartbeat <= 0:
		return c, fmt.Errorf("config: SSE_HEARTBEAT must be positive, got %s", c.SSEHeartbeat)
	case c.StuckIdleTimeout <= 0:
		return c, fmt.Errorf("config: STUCK_IDLE_TIMEOUT must be positive, got %s", c.StuckIdleTimeout)
	case c.LogFormat != "text" && c.LogFormat != "json":
		return c, fmt.Errorf("config: LOG_FORMAT must be text or json, got %q", c.LogFormat)
	case c.S3Endpoint != "" && (c.S3AccessKey == "" || c.S3SecretKey == ""):
		return c, errors.New("config: S3_ACCESS_KEY and S3_SECRET_KEY are required when S3_ENDPOINT is set")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return c, err
	}
	if _, err := c.prices(); err != nil {
		return c, err
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
	level, _ := parseLevel(c.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if c.LogFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, opts)
	}
	return slog.New(redact.NewHandler(h, c.redactor()))
}

// redactor masks the configured secrets by value, besides redact's patterns.
func (c config) redactor() *redact.Redactor {
	secrets := []string{c.OpenAIAPIKey, c.S3SecretKey, c.JWTSecret}
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
