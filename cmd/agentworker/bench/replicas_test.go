package bench

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentworker/agentworker/testing/dbtest"
)

// TestFilesRootSaysWhereFilesGo: the kind the replicas scenario reports is
// the file system its project files are really on, and they can be written.
func TestFilesRootSaysWhereFilesGo(t *testing.T) {
	t.Parallel()
	root, kind := filesRoot()
	dir, err := os.MkdirTemp(root, "files-root-")
	if err != nil {
		t.Fatalf("files root %s (%s) is not writable: %v", root, kind, err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	onTmpfs := st.Type == unix.TMPFS_MAGIC
	switch kind {
	case "tmpfs":
		if !onTmpfs {
			t.Errorf("files root %s reported as tmpfs, is file system type %#x", root, st.Type)
		}
	case "disk":
		if writableTmpfs(shm) {
			t.Errorf("files root %s on disk, but %s is a writable tmpfs", root, shm)
		}
	default:
		t.Errorf("files root kind %q, want tmpfs or disk", kind)
	}
}

// TestWaitDone: a round ends when no task is queued or running, and only
// counts if every task succeeded; a failed task is an error at once, not
// after the limit.
func TestWaitDone(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		statuses []string // each task's path from queued
		want     int
		err      error
	}{
		{name: "AllSucceeded", statuses: []string{"running,succeeded", "running,succeeded"}, want: 2},
		{name: "OneFailed", statuses: []string{"running,succeeded", "running,failed"}, want: 2, err: errRoundFailed},
		{name: "FewerThanWanted", statuses: []string{"running,succeeded"}, want: 2, err: errRoundFailed},
		{name: "StillRunning", statuses: []string{"running,succeeded", "running"}, want: 2, err: errRoundUnfinished},
		{name: "StillQueued", statuses: []string{""}, want: 1, err: errRoundUnfinished},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := &database{pool: dbtest.New(t), drop: func() {}}
			for _, path := range tt.statuses {
				var id string
				if err := db.pool.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
					VALUES (gen_random_uuid(), 'build', 'x') RETURNING id::text`).Scan(&id); err != nil {
					t.Fatal(err)
				}
				for _, status := range strings.Split(path, ",") {
					if status == "" {
						continue
					}
					if _, err := db.pool.Exec(ctx, `UPDATE ai_tasks SET status = $2 WHERE id = $1`, id, status); err != nil {
						t.Fatalf("task %s to %s: %v", id, status, err)
					}
				}
			}
			polls := 0
			err := waitDone(ctx, db, tt.want, 300*time.Millisecond, func() { polls++ })
			if !errors.Is(err, tt.err) {
				t.Fatalf("waitDone = %v, want %v", err, tt.err)
			}
			if busy := tt.err == errRoundUnfinished; !busy && polls > 0 {
				t.Errorf("nothing was queued or running, yet waitDone polled %d times", polls)
			} else if busy && polls == 0 {
				t.Errorf("waitDone gave up without polling")
			}
		})
	}
}

// TestScaleAgainstOneProcess: each run's scaling is its throughput over
// that many copies of the one-process run's; without a one-process run
// there is nothing to scale against.
func TestScaleAgainstOneProcess(t *testing.T) {
	t.Parallel()
	run := func(k int, perS float64) ReplicaRun {
		return ReplicaRun{Replicas: k, ReplicaRound: ReplicaRound{TasksPerS: perS}}
	}
	tests := []struct {
		name string
		runs []ReplicaRun
		want []float64
	}{
		{name: "Linear", runs: []ReplicaRun{run(1, 50), run(2, 100), run(4, 200)}, want: []float64{1, 1, 1}},
		{name: "Flat", runs: []ReplicaRun{run(1, 300), run(2, 300), run(4, 300)}, want: []float64{1, 0.5, 0.25}},
		{name: "OneLast", runs: []ReplicaRun{run(2, 90), run(1, 50)}, want: []float64{0.9, 1}},
		{name: "NoOneProcess", runs: []ReplicaRun{run(2, 90), run(4, 170)}, want: []float64{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			scale(tt.runs)
			for i, r := range tt.runs {
				if r.Scaling != tt.want[i] {
					t.Errorf("%d processes at %.0f/s: scaling %.2f, want %.2f", r.Replicas, r.TasksPerS, r.Scaling, tt.want[i])
				}
			}
		})
	}
}
