package sql_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/internal/devenv/proccpu"
	agentsql "github.com/agentworker/agentworker/sql"
)

// BenchmarkCheckpointRoundTrip is an iteration's end as a worker writes it,
// in one round trip: its events, its checkpoint and the next iteration's
// start, as three statements (each batch alone) or two (the start with the
// events: EventBatch.Next). Besides the time per round trip it reports the
// database backend's CPU per round trip (backend-µs/op) when the server
// runs on this machine.
func BenchmarkCheckpointRoundTrip(b *testing.B) {
	for _, statements := range []int{3, 2} {
		b.Run(map[int]string{3: "ThreeStatements", 2: "TwoStatements"}[statements], func(b *testing.B) {
			ctx := b.Context()
			pool := onePooled(b) // one backend does all the work
			task, f := claimed(b, pool)
			var backend int
			if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
				b.Fatal(err)
			}
			messages := json.RawMessage(`[{"role":"system","content":"` + strings.Repeat("Write the file, then call finish. ", 90) + `"}]`)
			cp := agentsql.Checkpoint{TaskID: task.ID, Attempt: task.Attempt, Iteration: 1, Messages: messages, State: json.RawMessage(`{"n":1}`)}
			spend := agentsql.Spend{TokensIn: 100, TokensOut: 20, Cost: 0.001}
			ticks0, local := proccpu.Ticks(backend)
			b.ResetTimer()
			for range b.N {
				var p agentsql.Pipeline
				var read agentsql.CheckpointRead
				batch := agentsql.EventBatch{TaskID: task.ID, ProjectID: task.ProjectID, Fence: &f.Epoch, Key: uuid.New(),
					Events: logEvents("tool done", "iteration end"), AfterCommit: true}
				next := agentsql.NextBatch{Key: uuid.New(), Events: logEvents("iteration start", "thinking")}
				if statements == 2 {
					batch.Next = &next
				}
				outcomes := []func(context.Context, agentsql.DBTX) ([]agentsql.EventRow, error){agentsql.QueueEventBatch(&p, batch)}
				agentsql.QueueSaveCheckpoint(&p, f, cp, spend, &read)
				if statements == 3 {
					outcomes = append(outcomes, agentsql.QueueEventBatch(&p, agentsql.EventBatch{TaskID: task.ID, ProjectID: task.ProjectID,
						Fence: &f.Epoch, Key: next.Key, Events: next.Events, AfterCommit: true, UnlessPaused: true}))
				}
				if err := p.Run(ctx, pool); err != nil {
					b.Fatal(err)
				}
				written := 0
				for _, outcome := range outcomes {
					rows, err := outcome(ctx, pool)
					if err != nil {
						b.Fatal(err)
					}
					written += len(rows)
				}
				if written != 4 {
					b.Fatalf("wrote %d events, want 4", written)
				}
			}
			b.StopTimer()
			if ticks1, ok := proccpu.Ticks(backend); local && ok {
				b.ReportMetric(float64(ticks1-ticks0)*float64(proccpu.Tick.Microseconds())/float64(b.N), "backend-µs/op")
			}
		})
	}
}
