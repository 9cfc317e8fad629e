package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/worker"
)

// InFlight is the result of N build tasks in flight at once against a model
// that answers each call after a fixed delay: with nothing shared on a
// task's path, every task ends one ideal time (two calls) after its insert.
type InFlight struct {
	Tasks        int     `json:"tasks"`
	ModelDelayMS float64 `json:"model_delay_ms"`
	IdealS       float64 `json:"ideal_s"`
	// MedianRatio and P99Ratio are insert → task finished, ÷ ideal.
	MedianRatio float64 `json:"median_ratio"`
	P99Ratio    float64 `json:"p99_ratio"`
	// Lock waiters of the scenario's database, sampled from pg_locks every
	// 100 ms: all, and those waiting on Postgres's NOTIFY queue lock other
	// than the Announcer's own notifying transaction (the lock is
	// cluster-wide: another database's notifier can hold it).
	LockWaitersMax       int     `json:"lock_waiters_max"`
	LockWaitersMean      float64 `json:"lock_waiters_mean"`
	NotifyLockWaitersMax int     `json:"notify_lock_waiters_max"`
	// Per task, from the worker's pool (statements it sent, River's
	// included) and the transaction ids taken (commits that wrote; see
	// writes).
	StatementsPerTask float64 `json:"statements_per_task"`
	RoundTripsPerTask float64 `json:"round_trips_per_task"`
	CommitsPerTask    float64 `json:"commits_per_task"`
	// EventReceiptMS is event written (its transaction's start, an upper
	// bound) → a LISTEN connection told of its task, for the running tasks'
	// own events; EventsPerS is the rate they were written at.
	EventReceiptMS Percentiles `json:"event_receipt_ms"`
	EventsPerS     float64     `json:"events_per_s"`
	// The receipt in two parts, when the database tracks commit
	// timestamps (track_commit_timestamp; the private cluster does):
	// the write itself (its transaction's start → its commit), and
	// commit → announcement arrived (the announcer, NOTIFY, the listener).
	EventWriteMS       Percentiles `json:"event_write_ms"`
	EventAfterCommitMS Percentiles `json:"event_after_commit_ms"`
	// Where the time goes: seconds from the insert to each task's handler
	// start, to the model's receipt of each first and second call, and to
	// each task's finish (each its own distribution: calls do not name
	// their task). With nothing waiting, the first call follows the start
	// at once, the second the first by one model delay, the finish the
	// second by another.
	Phases InFlightPhases `json:"phases_s"`
	// CPU is the CPU time per task from the insert to the last finish:
	// this process's (the worker, the scripted model, the scenario's
	// listener) and the database's backends'. The tasks' work is CPU
	// bound: n tasks take at least n × CPU ÷ CPUs of the machine.
	CPU CPUPerTask `json:"cpu_per_task"`
}

// InFlightPhases are distributions of seconds from the insert.
type InFlightPhases struct {
	Start      Percentiles `json:"start"`
	FirstCall  Percentiles `json:"first_call"`
	SecondCall Percentiles `json:"second_call"`
	Done       Percentiles `json:"done"`
}

// callTimes records when a model received each first and second call of
// a two-call build.
type callTimes struct {
	mu            sync.Mutex
	first, second []time.Time
}

// wrap returns r recording each call's arrival.
func (c *callTimes) wrap(r scripted.Responder) scripted.Responder {
	return scripted.Func(func(req *scripted.Request) scripted.Reply {
		now := time.Now()
		c.mu.Lock()
		if req.Messages[len(req.Messages)-1].Role == llm.RoleTool {
			c.second = append(c.second, now)
		} else {
			c.first = append(c.first, now)
		}
		c.mu.Unlock()
		return r.Respond(req)
	})
}

// since returns the calls' arrivals after t0, as durations from it.
func since(t0 time.Time, at []time.Time) []time.Duration {
	var out []time.Duration
	for _, t := range at {
		if t.After(t0) {
			out = append(out, t.Sub(t0))
		}
	}
	return out
}

// seconds turns percentiles in milliseconds into seconds.
func seconds(p Percentiles) Percentiles {
	return Percentiles{P50: p.P50 / 1000, P95: p.P95 / 1000, P99: p.P99 / 1000}
}

// fixedDelayModel answers every call after delay: write_file first, then
// finish after the tool result. A task is two calls: ideal 2 × delay.
func fixedDelayModel(delay time.Duration) scripted.Responder {
	return scripted.Func(func(req *scripted.Request) scripted.Reply {
		if req.Messages[len(req.Messages)-1].Role == llm.RoleTool {
			return scripted.Reply{Delay: delay, ToolCalls: []llm.ToolCall{{Name: "finish", Arguments: `{"summary":"wrote out.txt"}`}}}
		}
		return scripted.Reply{Delay: delay, ToolCalls: []llm.ToolCall{{Name: "write_file", Arguments: `{"path":"out.txt","content":"x\n"}`}}}
	})
}

// statementCounter counts the statements a pool sends (n), those of a
// pipeline included, and its round trips (a pipeline is one).
type statementCounter struct{ n, trips atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	c.trips.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.trips.Add(1)
	return ctx
}

func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}

func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func runInFlight(ctx context.Context, opts Options, r *Report) error {
	n, delay := 1000, 5*time.Second
	if opts.Quick {
		n, delay = 40, 100*time.Millisecond
	}
	if opts.InFlightModelDelay > 0 {
		delay = opts.InFlightModelDelay
	}
	var stmts statementCounter
	db, err := newWorkerDatabase(ctx, opts.AdminURL, n, &stmts)
	if err != nil {
		return err
	}
	defer db.drop()
	o := opts
	o.Concurrency = n
	calls := &callTimes{}
	p, err := startWarm(ctx, o, db, calls.wrap(fixedDelayModel(delay)))
	if err != nil {
		return err
	}
	defer p.stop(ctx)

	sctx, stopSampling := context.WithCancel(ctx)
	locks := sampleLocks(sctx, db)
	receipts := listenReceipts(sctx, db)
	writes0, err := writes(ctx, db)
	if err != nil {
		stopSampling()
		return err
	}
	stmts0, trips0 := stmts.n.Load(), stmts.trips.Load()

	cpu := startCPU(ctx, db, opts.StorePID)
	t0 := time.Now()
	if _, err := db.pool.Exec(ctx, `INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT gen_random_uuid(), 'build', 'in flight' FROM generate_series(1, $1)`, n); err != nil {
		stopSampling()
		return fmt.Errorf("queue %d tasks: %w", n, err)
	}
	var took, started []time.Duration
	deadline := time.After(max(20*delay, time.Minute))
	for len(took) < n {
		select {
		case id := <-p.timed.done:
			took = append(took, time.Since(t0))
			started = append(started, p.timed.startedAt(id).Sub(t0))
		case <-deadline:
			stopSampling()
			return fmt.Errorf("only %d of %d in-flight tasks done", len(took), n)
		case <-ctx.Done():
			stopSampling()
			return ctx.Err()
		}
	}
	elapsed := time.Since(t0)
	f := &r.InFlight
	f.CPU = cpu.perTask(n)
	stmtsRun, tripsRun := stmts.n.Load()-stmts0, stmts.trips.Load()-trips0
	stopSampling()
	lk, rc := <-locks, <-receipts
	writes1, err := writes(ctx, db)
	if err != nil {
		return err
	}
	var ok int
	if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM ai_tasks WHERE status = 'succeeded' AND prompt = 'in flight'").Scan(&ok); err != nil {
		return err
	}
	if ok != n {
		return fmt.Errorf("%d of %d in-flight tasks succeeded", ok, n)
	}
	ideal := 2 * delay
	slices.Sort(took)
	f.Tasks, f.ModelDelayMS, f.IdealS = n, float64(delay.Milliseconds()), ideal.Seconds()
	f.MedianRatio = ratio(took[len(took)/2].Seconds(), ideal.Seconds())
	f.P99Ratio = ratio(took[min(len(took)-1, len(took)*99/100)].Seconds(), ideal.Seconds())
	f.LockWaitersMax, f.LockWaitersMean, f.NotifyLockWaitersMax = lk.max, lk.mean, lk.notifyMax
	f.StatementsPerTask = ratio(float64(stmtsRun), float64(n))
	f.RoundTripsPerTask = ratio(float64(tripsRun), float64(n))
	f.CommitsPerTask = ratio(float64(writes1-writes0), float64(n))
	f.EventReceiptMS = percentiles(rc.lat)
	f.EventWriteMS, f.EventAfterCommitMS = percentiles(rc.write), percentiles(rc.afterCommit)
	f.EventsPerS = float64(len(rc.lat)) / elapsed.Seconds()
	calls.mu.Lock()
	f.Phases = InFlightPhases{Start: seconds(percentiles(started)), FirstCall: seconds(percentiles(since(t0, calls.first))),
		SecondCall: seconds(percentiles(since(t0, calls.second))), Done: seconds(percentiles(took))}
	calls.mu.Unlock()
	r.note("in flight: %d build tasks inserted in one statement, WORKER_CONCURRENCY=%d, pool %d; model delay %s per call, 2 calls (ideal %s); statements are those the process sent (River's included), commits are the transactions that wrote (transaction ids taken; trigger work is inside them)",
		n, n, worker.PoolSize(n), delay, ideal)
	return nil
}

type lockSamples struct {
	max, notifyMax int
	mean           float64
}

// sampleLocks samples pg_locks every 100 ms until ctx ends, counting the
// waiting locks of backends of db's database; the NOTIFY queue lock is the
// object lock on pg_database with objid 0, and the Announcer's statement
// starts with SELECT pg_notify(.
func sampleLocks(ctx context.Context, db *database) <-chan lockSamples {
	out := make(chan lockSamples, 1)
	go func() {
		var s lockSamples
		var sum, count int
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				if count > 0 {
					s.mean = float64(sum) / float64(count)
				}
				out <- s
				return
			case <-t.C:
			}
			var waiting, notify int
			err := db.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE l.locktype = 'object'
				    AND l.classid = 'pg_database'::regclass AND l.objid = 0 AND a.query NOT LIKE 'SELECT pg_notify(%')
				FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				WHERE NOT l.granted AND a.datname = current_database()`).Scan(&waiting, &notify)
			if err != nil {
				continue // ctx ended mid-query
			}
			sum += waiting
			count++
			s.max, s.notifyMax = max(s.max, waiting), max(s.notifyMax, notify)
		}
	}()
	return out
}

// receiptSamples are the latencies of the events received, and when each
// was written (created, by lat's index); write and afterCommit split them
// where the commit time is known.
type receiptSamples struct {
	lat, write, afterCommit []time.Duration
	created                 []time.Time
}

// listenReceipts follows every task's events as a subscriber does: LISTEN,
// and on each announcement read the named tasks' events after their
// cursors. An event counts when it was written before the announcement
// arrived; its latency is from its transaction's start (now(), at or
// before its commit) to the announcement's arrival, split at its commit
// when the database tracks commit timestamps.
func listenReceipts(ctx context.Context, db *database) <-chan receiptSamples {
	out := make(chan receiptSamples, 1)
	conn, err := pgx.Connect(ctx, db.url)
	if err != nil {
		out <- receiptSamples{}
		return out
	}
	if _, err := conn.Exec(ctx, "LISTEN "+agentsql.EventsChannel); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		out <- receiptSamples{}
		return out
	}
	reader, err := connectReceiptReader(ctx, db.url)
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		out <- receiptSamples{}
		return out
	}
	// Notifications are timestamped as they arrive, apart from the reads,
	// so a slow read never delays the next arrival's clock.
	type arrival struct {
		at time.Time
		a  agentsql.Announcement
	}
	arrivals := make(chan arrival, 100000)
	go func() {
		defer close(arrivals)
		defer conn.Close(context.WithoutCancel(ctx))
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return
			}
			at := time.Now()
			var a agentsql.Announcement
			if json.Unmarshal([]byte(n.Payload), &a) == nil {
				arrivals <- arrival{at, a}
			}
		}
	}()
	go func() {
		defer reader.Close(context.WithoutCancel(ctx))
		var s receiptSamples
		cursor := map[uuid.UUID]int{}
		for n := range arrivals {
			seqs := make([]int32, len(n.a.Tasks))
			for i, t := range n.a.Tasks {
				seqs[i] = int32(cursor[t])
			}
			rows, err := reader.Query(context.WithoutCancel(ctx), receiptQuery, n.a.Tasks, seqs)
			if err != nil {
				continue
			}
			late := map[uuid.UUID]bool{}
			for rows.Next() {
				var (
					task      uuid.UUID
					seq       int
					created   time.Time
					committed *time.Time
				)
				if rows.Scan(&task, &seq, &created, &committed) != nil || late[task] {
					continue
				}
				if created.After(n.at) { // written after this announcement: a later one covers it
					late[task] = true
					continue
				}
				s.lat = append(s.lat, n.at.Sub(created))
				s.created = append(s.created, created)
				if committed != nil {
					s.write = append(s.write, committed.Sub(created))
					s.afterCommit = append(s.afterCommit, n.at.Sub(*committed))
				}
				cursor[task] = seq
			}
			rows.Close()
		}
		out <- s
	}()
	return out
}

// receiptQuery reads the events of the tasks $1 after their seqs $2, with
// their commit times where tracked, each task's through its index.
const receiptQuery = `SELECT c.t, e.seq, e.created_at, e.committed
	FROM unnest($1::uuid[], $2::int[]) c(t, s)
	CROSS JOIN LATERAL (SELECT seq, created_at,
			CASE WHEN current_setting('track_commit_timestamp')::bool THEN pg_xact_commit_timestamp(xmin) END AS committed
		FROM agent_events WHERE task_id = c.t AND seq > c.s ORDER BY seq) e
	ORDER BY c.t, e.seq`

// connectReceiptReader connects the listener's reader. Its statement is
// planned on every call: a scenario's table grows from empty faster than
// it is analyzed, and a plan kept from its first minute scanned the whole
// table (hashing the tasks) on every announcement, half a CPU of the
// machine the receipts were measured on.
func connectReceiptReader(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	return pgx.ConnectConfig(ctx, cfg)
}

// writes returns the cluster's next transaction id. Every transaction that
// writes takes one, and only those write a commit record, so the
// difference of two readings counts the writing transactions in between
// (the scenarios run one at a time, so they are the scenario's), as they
// happen. pg_stat_database's xact_commit also counts read-only
// transactions, and a busy backend reports it late (at most once a
// second, not while another backend updates the same entry, and ten
// seconds after it turns idle), which carried one round's commits into
// the next.
func writes(ctx context.Context, db *database) (int64, error) {
	var n int64
	err := db.pool.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the next transaction id: %w", err)
	}
	return n, nil
}
