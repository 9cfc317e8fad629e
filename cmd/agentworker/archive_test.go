package main

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/archive"
	"github.com/agentworker/agentworker/events"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
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
	if after.String() != before.String() || bytes.Count(after.Bytes(), []byte("\n")) != 3 {
		t.Errorf("follow printed, archived:\n%s\nbefore:\n%s", after.String(), before.String())
	}
	var tail bytes.Buffer
	if err := run(ctx, []string{"follow", "--after", "2", task.ID.String()}, &tail); err != nil {
		t.Fatal(err)
	}
	if want := bytes.SplitAfterN(before.Bytes(), []byte("\n"), 3)[2]; !bytes.Equal(tail.Bytes(), want) {
		t.Errorf("follow --after 2 printed:\n%s\nwant:\n%s", tail.String(), want)
	}
}
