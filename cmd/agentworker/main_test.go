package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/auth"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/s3test"
)

func TestMain(m *testing.M) { dbtest.Main(m, s3test.LeakOption()) }

// clearEnv unsets every variable the binary reads, so the host's
// environment cannot leak into a test.
func clearEnv(t *testing.T) {
	t.Helper()
	typ := reflect.TypeFor[config]()
	for i := range typ.NumField() {
		k := typ.Field(i).Tag.Get("envconfig")
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"WORKER_CONCURRENCY": "many"}, "WORKER_CONCURRENCY"},
		{map[string]string{"WORKER_CONCURRENCY": "0"}, "WORKER_CONCURRENCY must be at least 1"},
		{map[string]string{"WORKER_ACTIVE_LIMIT": "-1"}, "WORKER_ACTIVE_LIMIT must be 0 (2 per CPU) or more"},
		{map[string]string{"MAX_ITERATIONS": "-1"}, "MAX_ITERATIONS"},
		{map[string]string{"TASK_LEASE": "soon"}, "TASK_LEASE"},
		{map[string]string{"S3_USE_SSL": "maybe"}, "S3_USE_SSL"},
		{map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		{map[string]string{"LOG_FORMAT": "xml"}, "LOG_FORMAT"},
		{map[string]string{"S3_ENDPOINT": "localhost:9000"}, "S3_ACCESS_KEY and S3_SECRET_KEY are required"},
		{map[string]string{"RUN_COMMAND": "always"}, "RUN_COMMAND must be off or sandbox"},
		{map[string]string{"RUN_COMMAND_CONCURRENCY": "0"}, "RUN_COMMAND_CONCURRENCY must be at least 1"},
		{map[string]string{"AUDIT_REFUSALS_PER_MINUTE": "0"}, "AUDIT_REFUSALS_PER_MINUTE must be at least 1"},
		{map[string]string{"RUN_COMMAND_MAX_TIMEOUT": "10ms"}, "RUN_COMMAND_MAX_TIMEOUT must be at least 1s"},
		{map[string]string{"TASKS_MD_PATH": "../tasks.md"}, "TASKS_MD_PATH"},
		{map[string]string{"TASKS_MD_PATH": ".env"}, "TASKS_MD_PATH"},
		{map[string]string{"CONTEXT_BUDGET_BYTES": "1023"}, "CONTEXT_BUDGET_BYTES must be at least 1024"},
		{map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", "LLM_MODEL": "o1-pro"}, `LLM_MODEL: model "o1-pro" has no price`},
		{map[string]string{"LLM_PRICES": "o1-pro=NaN:0"}, "LLM_PRICES"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, err := loadConfig()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("loadConfig() = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

func TestServeNeedsDatabaseAndModel(t *testing.T) {
	clearEnv(t)
	err := run(t.Context(), []string{"serve"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL is not set") {
		t.Fatalf("serve without DATABASE_URL: %v", err)
	}
	t.Setenv("DATABASE_URL", "postgres://u:hunter2secret@127.0.0.1:1/x?connect_timeout=1")
	err = run(t.Context(), []string{"serve"}, &bytes.Buffer{})
	if err == nil || strings.Contains(err.Error(), "hunter2secret") {
		t.Fatalf("serve with an unreachable database: %v (must fail without the password)", err)
	}
	t.Setenv("DATABASE_URL", "::not a url::")
	err = run(t.Context(), []string{"serve"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL is not a valid") {
		t.Fatalf("serve with a malformed DATABASE_URL: %v", err)
	}
}

func TestUnknownCommand(t *testing.T) {
	clearEnv(t)
	if err := run(t.Context(), []string{"frobnicate"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "frobnicate") {
		t.Fatalf("run(frobnicate) = %v", err)
	}
}

// The demo runs the whole path on the embedded default: a private Postgres
// from the local binaries, a local-directory store, the scripted model.
func TestDemoOnEmbeddedDefault(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	t.Setenv("STORAGE_DIR", dir)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"demo"}, &out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{"bundled scripted demo model", "stage_enter claim", "tool_call", "write_file(hello.txt) ok",
		"file_update create hello.txt", "completed  succeeded", "ended succeeded", "--- hello.txt (3 bytes)\nhi"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "*", "hello.txt"))
	if len(matches) != 1 {
		t.Fatalf("hello.txt files under STORAGE_DIR: %v", matches)
	}
}

func TestToken(t *testing.T) {
	clearEnv(t)
	const secret = "token-test-secret-0123456789"
	project := "0190c6a4-7d3e-7b7a-9c1e-6f4f3b2a1d00"
	if err := run(t.Context(), []string{"token", "--project", project}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "JWT_SECRET") {
		t.Fatalf("token without JWT_SECRET: %v", err)
	}
	t.Setenv("JWT_SECRET", secret)
	for _, bad := range [][]string{{"token"}, {"token", "--project", "nope"}, {"token", "--service", "--ttl", "-1s"},
		{"token", "--project", project, "--ttl", "25h"}} { // past JWT_MAX_TTL
		if err := run(t.Context(), bad, &bytes.Buffer{}); err == nil {
			t.Errorf("run(%v) succeeded", bad)
		}
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"token", "--project", project, "--subject", "ops"}, &out); err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(strings.TrimSpace(out.String()))
	if err != nil || !c.CanAccess(project) || c.CanAccess("0190c6a4-7d3e-7b7a-9c1e-6f4f3b2a1d01") || c.Subject != "ops" ||
		c.IssuedAt == nil || c.ID == "" {
		t.Errorf("token claims = %+v, %v; want project %s only, subject ops, iat and jti", c, err, project)
	}
}

// TestRevoke: `agentworker revoke` refuses the tokens of the projects named
// issued until now.
func TestRevoke(t *testing.T) {
	clearEnv(t)
	dbURL := dbtest.NewURL(t)
	t.Setenv("DATABASE_URL", dbURL)
	project := uuid.New()
	if err := run(t.Context(), []string{"revoke"}, &bytes.Buffer{}); err == nil {
		t.Error("revoke without --project or --all succeeded")
	}
	if err := run(t.Context(), []string{"migrate"}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"revoke", "--project", project.String()}, &out); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	nb, err := agentsql.TokensNotBefore(t.Context(), pool, []string{project.String()})
	if err != nil || nb.IsZero() || !strings.Contains(out.String(), project.String()) {
		t.Errorf("after revoke (%q): not before %v, %v", out.String(), nb, err)
	}
}
