package dbtest

import (
	"testing"

	"github.com/google/uuid"

	agentsql "github.com/agentworker/agentworker/sql"
)

// HeldBuild inserts a build task of projectID and moves it to running, as a
// claim does, returning the holder's fence: what change-set writes need.
// The task is inserted queued (the state machine's only start), so its
// pickup trigger runs unless db is a transaction that turned it off.
func HeldBuild(t testing.TB, db agentsql.DBTX, projectID uuid.UUID, prompt string) agentsql.Fence {
	t.Helper()
	var f agentsql.Fence
	if err := db.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'build', $2) RETURNING id`,
		projectID, prompt).Scan(&f.TaskID); err != nil {
		t.Fatalf("insert build task: %v", err)
	}
	if err := db.QueryRow(t.Context(), `UPDATE ai_tasks SET status = 'running' WHERE id = $1 RETURNING fence`, f.TaskID).Scan(&f.Epoch); err != nil {
		t.Fatalf("hold build task %s: %v", f.TaskID, err)
	}
	return f
}

// AsWorker is a FROM item that makes an UPDATE of ai_tasks the worker's:
// only the worker changes the machine's columns (attempt, retries,
// last_seq, fence, lease_owner, lease_expires_at, river_job_id). A test
// that stages what a worker would have done puts it before its WHERE:
//
//	UPDATE ai_tasks SET lease_expires_at = now() ` + AsWorker + ` WHERE id = $1
const AsWorker = ` FROM (SELECT set_config('agentworker.machine', 'on', true)) AS worker `
