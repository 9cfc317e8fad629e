package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/events"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// claimed inserts a build task and claims it, as a worker does.
func claimed(t *testing.T, pool *pgxpool.Pool) agentsql.Task {
	t.Helper()
	task := newTask(t, pool, "build")
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		c, err := agentsql.ClaimTask(t.Context(), tx, task.ID, 1, "test", time.Minute)
		task = c.Task
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// messages returns the log messages and phases of a task's timeline, in
// seq order, checking the seqs have no gap.
func messages(t *testing.T, pool *pgxpool.Pool, task agentsql.Task) []string {
	t.Helper()
	rows, err := agentsql.TaskEventsAfter(t.Context(), pool, task.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, r := range rows {
		if *r.Seq != i+1 {
			t.Errorf("seq %d at position %d", *r.Seq, i+1)
		}
		var p struct{ Message, Phase string }
		_ = json.Unmarshal(r.Payload, &p)
		out = append(out, p.Message+p.Phase)
	}
	return out
}

func checkpoint(task agentsql.Task, iteration int) agentsql.Checkpoint {
	return agentsql.Checkpoint{TaskID: task.ID, Attempt: task.Attempt, Iteration: iteration,
		Messages: json.RawMessage(`[]`), State: json.RawMessage(`{}`)}
}

func logged(msg string) events.Payload { return events.Log{Level: events.LevelInfo, Message: msg} }

// checkpointThen sends msg and a checkpoint at iteration 1 of task, then
// next (unless empty) if no pause was requested, as one pipeline through db.
func checkpointThen(t *testing.T, rec *events.Recorder, db events.Pipeliner, task agentsql.Task, msg, next string) (written, pause bool, err error) {
	t.Helper()
	var then events.Unpaused
	var read agentsql.CheckpointRead
	if next != "" {
		then = events.Unpaused{Payloads: []events.Payload{logged(next)}, Paused: func() bool { return read.PauseRequested }}
	}
	written, _, err = rec.InPipelineUnpaused(t.Context(), db, func(p *agentsql.Pipeline) error {
		agentsql.QueueSaveCheckpoint(p, agentsql.Fence{TaskID: task.ID, Epoch: task.Fence}, checkpoint(task, 1), agentsql.Spend{}, &read)
		return nil
	}, then, logged(msg))
	return written, read.PauseRequested, err
}

// failingFinish queues a finish of the task held by fence that Postgres
// refuses (a NUL byte in text): nothing in its pipeline commits.
func failingFinish(fence agentsql.Fence) func(p *agentsql.Pipeline) error {
	return func(p *agentsql.Pipeline) error {
		return agentsql.QueueFinishTask(p, fence, agentsql.Outcome{Status: agentsql.StatusSucceeded, RunStatus: "succeeded", Model: "bad\x00model"})
	}
}

// lostReply sends pipelines through a pool, and after the first one has
// committed, reports its reply lost, as a connection cut after the commit
// would.
type lostReply struct {
	*pgxpool.Pool
	lost bool
}

var errReplyLost = errors.New("connection reset after commit")

func (l *lostReply) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return &lostResults{BatchResults: l.Pool.SendBatch(ctx, b), l: l}
}

type lostResults struct {
	pgx.BatchResults
	l *lostReply
}

func (r *lostResults) Close() error {
	err := r.BatchResults.Close()
	if err == nil && !r.l.lost {
		r.l.lost = true
		return errReplyLost
	}
	return err
}

// TestRecorderInPipeline: a pipeline's events and statements commit
// together or not at all; events of one that did not commit, or whose reply
// was lost, are written by the next write, once; once fenced, nothing is.
func TestRecorderInPipeline(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()

	t.Run("Commits", func(t *testing.T) {
		t.Parallel()
		task := claimed(t, pool)
		fence := agentsql.Fence{TaskID: task.ID, Epoch: task.Fence}
		rec := events.NewRecorder(pool, task.ID, task.ProjectID, events.WithFence(task.Fence))
		rec.Add(logged("queued"))
		var read agentsql.CheckpointRead
		evs, err := rec.InPipeline(ctx, pool, func(p *agentsql.Pipeline) error {
			agentsql.QueueSaveCheckpoint(p, fence, checkpoint(task, 1), agentsql.Spend{TokensIn: 7}, &read)
			return nil
		}, logged("iteration 1"))
		if err != nil || len(evs) != 2 || read.PauseRequested || read.ProjectCapped {
			t.Fatalf("InPipeline = %d events, read %+v, %v; want 2, no pause, no cap, nil", len(evs), read, err)
		}
		if cp, ok, err := agentsql.LoadCheckpoint(ctx, pool, task.ID); err != nil || !ok || cp.Iteration != 1 {
			t.Fatalf("checkpoint = %+v, %v, %v; want iteration 1", cp, ok, err)
		}
		// A pause request, and a cap the project now has, are read back
		// by the pipeline's checkpoint.
		if _, err := agentsql.ControlTask(ctx, pool, task.ID, agentsql.ActionPause, agentsql.ControlOpts{}); err != nil {
			t.Fatal(err)
		}
		capUSD := 5.0
		if err := agentsql.SetProjectSettings(ctx, pool, agentsql.ProjectSettings{ProjectID: task.ProjectID, MaxCostUSDPerDay: &capUSD}); err != nil {
			t.Fatal(err)
		}
		if _, err := rec.InPipeline(ctx, pool, func(p *agentsql.Pipeline) error {
			agentsql.QueueSaveCheckpoint(p, fence, checkpoint(task, 2), agentsql.Spend{}, &read)
			return nil
		}); err != nil || !read.PauseRequested || !read.ProjectCapped {
			t.Fatalf("checkpoint after a pause request and a cap: read %+v, %v; want both", read, err)
		}
		if got, err := agentsql.GetTask(ctx, pool, task.ID); err != nil || got.TokensIn != 7 {
			t.Fatalf("task tokens_in = %d, %v; want the spend, 7", got.TokensIn, err)
		}
	})

	t.Run("FailedStatementCommitsNothing", func(t *testing.T) {
		t.Parallel()
		task := claimed(t, pool)
		fence := agentsql.Fence{TaskID: task.ID, Epoch: task.Fence}
		rec := events.NewRecorder(pool, task.ID, task.ProjectID, events.WithFence(task.Fence))
		// The finish fails after the events' statement succeeded, and
		// takes it with it.
		_, err := rec.InPipeline(ctx, pool, failingFinish(fence), logged("closing"))
		if err == nil {
			t.Fatal("a pipeline with a failing statement succeeded")
		}
		t.Logf("pipeline failed: %v", err)
		if got := messages(t, pool, task); len(got) != 0 {
			t.Fatalf("after the failed pipeline the timeline holds %v; want nothing", got)
		}
		if got, err := agentsql.GetTask(ctx, pool, task.ID); err != nil || got.Status != agentsql.StatusRunning {
			t.Fatalf("task = %s, %v; want still running", got.Status, err)
		}
		if evs, err := rec.Emit(ctx, logged("next")); err != nil || len(evs) != 2 {
			t.Fatalf("next write = %d events, %v; want the failed one, then the new one", len(evs), err)
		}
		if got := strings.Join(messages(t, pool, task), "|"); got != "closing|next" {
			t.Fatalf("timeline = %s, want closing|next", got)
		}
	})

	// With a next iteration's start (InPipelineUnpaused) or without.
	for _, tc := range []struct {
		name, next, then, want string
	}{
		{"LostReplyWrittenOnce", "", "iteration 2", "iteration 1|iteration 2"},
		{"LostReplyWrittenOnceWithNext", "start 2", "error", "iteration 1|start 2|error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			task := claimed(t, pool)
			rec := events.NewRecorder(pool, task.ID, task.ProjectID, events.WithFence(task.Fence))
			if _, _, err := checkpointThen(t, rec, &lostReply{Pool: pool}, task, "iteration 1", tc.next); !errors.Is(err, errReplyLost) {
				t.Fatalf("InPipeline = %v, want the lost reply", err)
			}
			if _, err := rec.Emit(ctx, logged(tc.then)); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(messages(t, pool, task), "|"); got != tc.want {
				t.Fatalf("timeline = %s, want %s (what committed, once)", got, tc.want)
			}
		})
	}

	for _, next := range []string{"", "start 2"} {
		t.Run("Fenced"+map[string]string{"": "", "start 2": "WithNext"}[next], func(t *testing.T) {
			t.Parallel()
			task := claimed(t, pool)
			rec := events.NewRecorder(pool, task.ID, task.ProjectID, events.WithFence(task.Fence))
			if _, err := agentsql.ControlTask(ctx, pool, task.ID, agentsql.ActionCancel, agentsql.ControlOpts{}); err != nil {
				t.Fatal(err)
			}
			if written, _, err := checkpointThen(t, rec, pool, task, "late", next); !errors.Is(err, agentsql.ErrFenced) || written {
				t.Fatalf("InPipeline after a cancel = written %v, %v; want ErrFenced", written, err)
			}
			if _, ok, err := agentsql.LoadCheckpoint(ctx, pool, task.ID); err != nil || ok {
				t.Fatalf("a fenced pipeline saved a checkpoint (%v, %v)", ok, err)
			}
			if _, err := rec.Emit(ctx, logged("later")); !errors.Is(err, agentsql.ErrFenced) {
				t.Fatalf("write after the fenced pipeline = %v, want ErrFenced", err)
			}
			got := messages(t, pool, task)
			if len(got) == 0 || got[len(got)-1] != "cancelled" || strings.Contains(strings.Join(got, "|"), "late") || strings.Contains(strings.Join(got, "|"), "start 2") {
				t.Fatalf("timeline = %v: the cancel's terminal event must be the last, the late events absent", got)
			}
		})
	}
}

// TestRecorderInPipelineUnpaused: the batch a checkpoint's pipeline writes
// last (the next iteration's start) is written after the rest, and only
// while no pause is requested; a pipeline that does not commit takes it
// with it for good. A lost reply and a fence: TestRecorderInPipeline.
func TestRecorderInPipelineUnpaused(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()

	t.Run("WrittenAfterTheRest", func(t *testing.T) {
		t.Parallel()
		task := claimed(t, pool)
		rec := events.NewRecorder(pool, task.ID, task.ProjectID, events.WithFence(task.Fence))
		written, pause, err := checkpointThen(t, rec, pool, task, "iteration 1", "start 2")
		if err != nil || !written || pause {
			t.Fatalf("InPipelineUnpaused = written %v, pause %v, %v; want written, no pause", written, pause, err)
		}
		if _, err := rec.Emit(ctx, logged("thinking")); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(messages(t, pool, task), "|"); got != "iteration 1|start 2|thinking" {
			t.Fatalf("timeline = %s, want iteration 1|start 2|thinking", got)
		}
	})

	t.Run("NotWrittenWhenPaused", func(t *testing.T) {
		t.Parallel()
		task := claimed(t, pool)
		rec := events.NewRecorder(pool, task.ID, task.ProjectID, events.WithFence(task.Fence))
		if _, err := agentsql.ControlTask(ctx, pool, task.ID, agentsql.ActionPause, agentsql.ControlOpts{}); err != nil {
			t.Fatal(err)
		}
		written, pause, err := checkpointThen(t, rec, pool, task, "iteration 1", "start 2")
		if err != nil || written || !pause {
			t.Fatalf("InPipelineUnpaused after a pause request = written %v, pause %v, %v; want not written, pause", written, pause, err)
		}
		if cp, ok, err := agentsql.LoadCheckpoint(ctx, pool, task.ID); err != nil || !ok || cp.Iteration != 1 {
			t.Fatalf("checkpoint = %+v, %v, %v; want iteration 1", cp, ok, err)
		}
		if _, err := rec.Emit(ctx, logged("paused")); err != nil {
			t.Fatal(err)
		}
		// The request wrote its own event first.
		if got := strings.Join(messages(t, pool, task), "|"); !strings.HasSuffix(got, "|iteration 1|paused") || strings.Contains(got, "start 2") {
			t.Fatalf("timeline = %s, want the request's event, then iteration 1|paused", got)
		}
	})

	// A pipeline with no new events of its own writes next in a statement
	// of its own, after the checkpoint: with nothing else to write, or with
	// only a batch sent again, which writes nothing if it committed before
	// (its reply lost) and must not take next with it.
	for _, tc := range []struct {
		name  string
		first string // the pipeline before: "", "failed" or "lost reply"
		want  string
	}{
		{"AloneWithoutEvents", "", "start 2"},
		{"AloneAfterAFailedPipeline", "failed", "iteration 1|start 2"},
		{"AloneAfterALostReply", "lost reply", "iteration 1|start 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			task := claimed(t, pool)
			fence := agentsql.Fence{TaskID: task.ID, Epoch: task.Fence}
			rec := events.NewRecorder(pool, task.ID, task.ProjectID, events.WithFence(task.Fence))
			switch tc.first {
			case "failed":
				// Nothing commits, and "iteration 1" waits to be sent again.
				if _, err := rec.InPipeline(ctx, pool, failingFinish(fence), logged("iteration 1")); err == nil {
					t.Fatal("a pipeline with a failing statement succeeded")
				}
			case "lost reply":
				if _, _, err := checkpointThen(t, rec, &lostReply{Pool: pool}, task, "iteration 1", ""); !errors.Is(err, errReplyLost) {
					t.Fatalf("InPipeline = %v, want the lost reply", err)
				}
			}
			var read agentsql.CheckpointRead
			written, _, err := rec.InPipelineUnpaused(ctx, pool, func(p *agentsql.Pipeline) error {
				agentsql.QueueSaveCheckpoint(p, fence, checkpoint(task, 1), agentsql.Spend{}, &read)
				return nil
			}, events.Unpaused{Payloads: []events.Payload{logged("start 2")}, Paused: func() bool { return read.PauseRequested }})
			if err != nil || !written {
				t.Fatalf("InPipelineUnpaused = written %v, %v; want written", written, err)
			}
			if got := strings.Join(messages(t, pool, task), "|"); got != tc.want {
				t.Fatalf("timeline = %s, want %s", got, tc.want)
			}
		})
	}

	t.Run("GoneWithAFailedPipeline", func(t *testing.T) {
		t.Parallel()
		task := claimed(t, pool)
		fence := agentsql.Fence{TaskID: task.ID, Epoch: task.Fence}
		rec := events.NewRecorder(pool, task.ID, task.ProjectID, events.WithFence(task.Fence))
		written, _, err := rec.InPipelineUnpaused(ctx, pool, failingFinish(fence), events.Unpaused{Payloads: []events.Payload{logged("start 2")}, Paused: func() bool { return false }}, logged("iteration 1"))
		if err == nil || written {
			t.Fatalf("a pipeline with a failing statement = written %v, %v; want an error", written, err)
		}
		if _, err := rec.Emit(ctx, logged("error")); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(messages(t, pool, task), "|"); got != "iteration 1|error" {
			t.Fatalf("timeline = %s, want iteration 1|error: the next iteration never started", got)
		}
	})
}
