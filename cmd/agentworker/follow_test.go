package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/events/sse"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// follow --sse prints a task's timeline from the gateway, as a browser
// receives it, and stops at the terminal event.
func TestFollowThroughTheGateway(t *testing.T) {
	clearEnv(t)
	pool := dbtest.New(t)
	task, err := agentsql.InsertTask(t.Context(), pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "chat", Prompt: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewRecorder(pool, task.ID, task.ProjectID)
	if _, err := rec.Emit(t.Context(),
		events.Progress{Kind: events.KindStageEnter, Stage: "claim"},
		events.ToolCall{ToolName: "list_files", ArgsSummary: "src", Success: true},
		events.AgentPhase{Phase: events.PhaseCompleted, Status: "succeeded", Summary: "all done"},
		events.Log{Level: "info", Message: "after the end"},
	); err != nil {
		t.Fatal(err)
	}
	verifier, err := auth.NewVerifier("follow-test-secret-0123456789", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	hub := sse.NewHub(pool, nil)
	go func() { _ = hub.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-hub.Done() })
	mux := http.NewServeMux()
	api.New(pool, sse.NewStreams(pool, hub, sse.Config{}), api.Config{Verifier: verifier}).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	token, err := verifier.Sign(auth.Claims{Projects: []string{task.ProjectID.String()},
		RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	if err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	fctx, fcancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer fcancel()
	if err := run(fctx, []string{"follow", "--sse", srv.URL + "/", "--token", token, task.ID.String()}, &out); err != nil {
		t.Fatalf("follow --sse: %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "list_files(src) ok") || !strings.Contains(lines[2], "completed  succeeded: all done") {
		t.Fatalf("follow --sse printed:\n%s", out.String())
	}

	// Resuming after a cursor prints only what follows it.
	out.Reset()
	if err := run(fctx, []string{"follow", "--sse", srv.URL, "--token", token, "--after", "1", task.ID.String()}, &out); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.TrimSpace(out.String()), "\n") + 1; n != 2 {
		t.Fatalf("follow --sse --after 1 printed %d lines:\n%s", n, out.String())
	}

	// A token for another project is refused, not retried forever.
	other, _ := verifier.Sign(auth.Claims{Projects: []string{uuid.NewString()},
		RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	err = run(fctx, []string{"follow", "--sse", srv.URL, "--token", other, task.ID.String()}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("follow --sse with another project's token: %v, want a 403 error", err)
	}
}
