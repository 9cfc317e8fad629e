package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentworker/agentworker/api"
	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/metrics"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/logtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/traceid"
)

// TestTraceIDEndToEnd wires the process as serve does, with its logger:
// the X-Trace-ID of a request that creates a task comes back in the
// answer, is logged on the request's line, stored with the task, carried
// into its events and onto the log lines of its model calls, and printed
// by follow. A header unfit to repeat is replaced, never echoed.
func TestTraceIDEndToEnd(t *testing.T) {
	clearEnv(t)
	model := llmtest.New(t, llmtest.Text("hello"), llmtest.Text("hello"), llmtest.Text("hello"), llmtest.Text("hello"))
	const secret = "trace-test-secret-0123456789"
	for k, v := range map[string]string{"DATABASE_URL": dbtest.NewURL(t), "STORAGE_DIR": t.TempDir(),
		"OPENAI_BASE_URL": model.URL(), "OPENAI_API_KEY": "sk-test-not-a-real-key-000000", "LLM_MODEL": llmtest.Model, "LLM_PRICES": llmtest.Model + "=0:0",
		"JWT_SECRET": secret, "LOG_LEVEL": "debug", "LOG_FORMAT": "json", "TASKS_MD_PATH": ""} {
		t.Setenv(k, v)
	}
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	var logs logtest.Buffer
	log := cfg.loggerTo(&logs)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := storage.NewLocal(cfg.StorageDir)
	if err != nil {
		t.Fatal(err)
	}
	client, err := newLLM(cfg, log, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := startWorker(ctx, cfg, log, pool, st, nil, client, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := svc.Stop(sctx); err != nil {
			t.Errorf("stop worker: %v", err)
		}
	})
	m, err := metrics.New(prometheus.NewRegistry(), pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	hctx, stopHTTP := context.WithCancel(context.Background())
	t.Cleanup(stopHTTP) // ends the event hub
	h, err := httpHandler(hctx, cfg, log, pool, st, nil, m, "on", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	project := uuid.New()
	token := operatorToken(t, secret, project)
	create := func(t *testing.T, trace string) (answered string, task agentsql.Task) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/projects/"+project.String()+"/tasks",
			strings.NewReader(`{"type": "chat", "prompt": "say hello"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(traceid.Header, trace)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var view api.TaskView
		if err := json.NewDecoder(resp.Body).Decode(&view); err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("create task: status %d, %v", resp.StatusCode, err)
		}
		if task, err = agentsql.GetTask(ctx, pool, view.ID); err != nil {
			t.Fatal(err)
		}
		if view.TraceID != task.TraceID {
			t.Errorf("the create answered trace_id %q, the task holds %q", view.TraceID, task.TraceID)
		}
		return resp.Header.Get(traceid.Header), task
	}

	const trace = "req-7f3a.e2e_1"
	answered, task := create(t, trace)
	if answered != trace || task.TraceID != trace {
		t.Fatalf("X-Trace-ID %q: answered %q, stored %q", trace, answered, task.TraceID)
	}
	poll.Until(t, "the task succeeds", 60*time.Second, func() bool {
		tk, err := agentsql.GetTask(ctx, pool, task.ID)
		return err == nil && tk.Status == agentsql.StatusSucceeded
	})

	// Its events: the phase the handler enters and the end name the trace.
	rows, err := agentsql.TaskEventsAfter(ctx, pool, task.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	traced := map[string]string{}
	for _, row := range rows {
		ev := events.FromRow(row)
		if ev.Type != events.TypeAgentPhase {
			continue
		}
		p, err := ev.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if ph := p.(*events.AgentPhase); ph.TraceID != "" {
			traced[ph.Phase] = ph.TraceID
		}
	}
	if traced[events.PhaseCompleted] != trace || len(traced) < 2 {
		t.Errorf("agent_phase events with a trace id: %v, want the entered phase and completed with %q", traced, trace)
	}

	// Its log lines: the request's, and each model call's.
	var requestLines, callLines int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			t.Fatalf("log line is not JSON: %s", line)
		}
		switch {
		case rec["msg"] == "api request" && rec["method"] == "POST":
			requestLines++
			if rec[traceid.Key] != trace {
				t.Errorf("the request's log line: %s", line)
			}
		case rec["msg"] == "llm call" && rec["task_id"] == task.ID.String():
			callLines++
			if rec[traceid.Key] != trace {
				t.Errorf("a model call's log line: %s", line)
			}
		}
	}
	if requestLines != 1 || callLines == 0 {
		t.Errorf("logged %d request lines (want 1) and %d model call lines (want some):\n%s", requestLines, callLines, logs.String())
	}

	// follow prints it, above the timeline and on the traced phases.
	var out bytes.Buffer
	if err := follow(ctx, cfg, []string{task.ID.String()}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "task "+task.ID.String()+" trace "+trace+"\n") ||
		!strings.Contains(out.String(), "completed  succeeded") || !strings.Contains(out.String(), "[trace "+trace+"]") {
		t.Errorf("follow printed:\n%s", out.String())
	}

	for _, tc := range []struct{ name, header string }{
		{"TooLong", strings.Repeat("a", traceid.MaxLen+1)},
		{"BadChars", "x'; DROP TABLE ai_tasks;--"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answered, task := create(t, tc.header)
			if answered == tc.header || !traceid.Valid(answered) || task.TraceID != answered {
				t.Fatalf("X-Trace-ID %q: answered %q, stored %q; want a new valid id, stored", tc.header, answered, task.TraceID)
			}
		})
	}
}

// operatorToken signs with secret a token for project, valid ten minutes.
func operatorToken(t *testing.T, secret string, project uuid.UUID) string {
	t.Helper()
	verifier, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	token, err := verifier.Sign(auth.Claims{Projects: []string{project.String()},
		RegisteredClaims: jwt.RegisteredClaims{Subject: "operator", ExpiresAt: jwt.NewNumericDate(time.Now().Add(10 * time.Minute))}})
	if err != nil {
		t.Fatal(err)
	}
	return token
}
