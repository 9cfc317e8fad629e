package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/archive"
	"github.com/agentworker/agentworker/auth"
	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/internal/devenv/loopback"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/testing/s3test"
)

// follow prints an archived task whose rows were dropped exactly as it
// printed it before, reading the archive named by ARCHIVE_PREFIX in
// S3_BUCKET.
func TestFollowPrintsAnArchivedTask(t *testing.T) {
	clearEnv(t)
	dbURL := dbtest.NewURL(t)
	s3cfg := s3test.Config(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := storage.NewS3(ctx, s3cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	const prefix = "_timelines/"
	arch, err := archive.New(pool, store, archive.Config{Prefix: prefix, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	task, err := agentsql.InsertTask(ctx, pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "chat", Prompt: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.NewRecorder(pool, task.ID, task.ProjectID).Emit(ctx,
		events.Progress{Kind: events.KindStageEnter, Stage: "claim"},
		events.ToolCall{ToolName: "list_files", ArgsSummary: "src", Success: true},
		events.AgentPhase{Phase: events.PhaseCompleted, Status: "succeeded", Summary: "all done"},
	); err != nil {
		t.Fatal(err)
	}
	if _, err := agentsql.ControlTask(ctx, pool, task.ID, agentsql.ActionCancel, agentsql.ControlOpts{}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", dbURL)
	t.Setenv("S3_ENDPOINT", s3cfg.Endpoint)
	t.Setenv("S3_ACCESS_KEY", s3cfg.AccessKey)
	t.Setenv("S3_SECRET_KEY", s3cfg.SecretKey)
	t.Setenv("S3_BUCKET", s3cfg.Bucket)
	t.Setenv("S3_USE_SSL", strconv.FormatBool(s3cfg.UseSSL))
	t.Setenv("ARCHIVE_PREFIX", prefix)
	var before bytes.Buffer
	if err := run(ctx, []string{"follow", task.ID.String()}, &before); err != nil {
		t.Fatalf("follow: %v\n%s", err, before.String())
	}

	if err := arch.ArchiveTasks(ctx, []uuid.UUID{task.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM agent_events WHERE task_id = $1`, task.ID); err != nil {
		t.Fatal(err)
	}
	var after bytes.Buffer
	if err := run(ctx, []string{"follow", task.ID.String()}, &after); err != nil {
		t.Fatalf("follow an archived task: %v\n%s", err, after.String())
	}
	if after.String() != before.String() || bytes.Count(after.Bytes(), []byte("\n")) != 4 { // the task and trace, then 3 events
		t.Errorf("follow printed, archived:\n%s\nbefore:\n%s", after.String(), before.String())
	}
	var tail bytes.Buffer
	if err := run(ctx, []string{"follow", "--after", "2", task.ID.String()}, &tail); err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(before.Bytes(), []byte("\n"))
	if want := slices.Concat(lines[0], lines[3]); !bytes.Equal(tail.Bytes(), want) {
		t.Errorf("follow --after 2 printed:\n%s\nwant:\n%s", tail.String(), want)
	}
}

// agentworker serve reads archived timelines from its bucket: a finished
// task archived under the default ARCHIVE_PREFIX, its rows dropped, is
// served by the real process's /v1/tasks/{id}/events as it was before,
// as JSON and as a stream.
func TestServeServesAnArchivedTimeline(t *testing.T) {
	e := newProcEnv(t)
	port, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	const secret = "serve-archive-test-secret-0123456789"
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	e.env = append(e.env, fmt.Sprintf("HTTP_ADDR=127.0.0.1:%d", port), "JWT_SECRET="+secret)
	task, err := agentsql.InsertTask(t.Context(), e.pool, agentsql.NewTask{ProjectID: uuid.New(), Type: "chat", Prompt: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.NewRecorder(e.pool, task.ID, task.ProjectID).Emit(t.Context(),
		events.Log{Level: events.LevelInfo, Message: "<first>"},
		events.ToolCall{ToolName: "list_files", ArgsSummary: "src", Success: true},
		events.AgentPhase{Phase: events.PhaseCompleted, Status: "succeeded", Summary: "all done"},
	); err != nil {
		t.Fatal(err)
	}
	if _, err := agentsql.ControlTask(t.Context(), e.pool, task.ID, agentsql.ActionCancel, agentsql.ControlOpts{}); err != nil {
		t.Fatal(err)
	}
	e.start(t, 30*time.Second)
	verifier, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	token, err := verifier.Sign(auth.Claims{Projects: []string{task.ProjectID.String()},
		RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	if err != nil {
		t.Fatal(err)
	}
	page := func() string {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/tasks/"+task.ID.String()+"/events", nil)
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("events page: %d %s, %v", resp.StatusCode, body, err)
		}
		return string(body)
	}
	poll.Until(t, "serve answers", 60*time.Second, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	before := page()

	store, err := storage.NewS3(t.Context(), e.s3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	arch, err := archive.New(e.pool, store, archive.Config{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := arch.ArchiveTasks(t.Context(), []uuid.UUID{task.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(t.Context(), `DELETE FROM agent_events WHERE task_id = $1`, task.ID); err != nil {
		t.Fatal(err)
	}
	if after := page(); after != before || strings.Count(after, `"seq":`) < 3 {
		t.Errorf("served after archiving:\n%s\nbefore:\n%s", after, before)
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"follow", "--sse", base, "--token", token, task.ID.String()}, &out); err != nil {
		t.Fatalf("follow --sse: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "completed  succeeded: all done") {
		t.Errorf("follow --sse printed:\n%s", out.String())
	}
}
