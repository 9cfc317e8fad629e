package bench

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
)

func TestPercentiles(t *testing.T) {
	t.Parallel()
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	if got := percentiles(s); got != (Percentiles{P50: 50, P95: 95, P99: 99}) {
		t.Fatalf("percentiles = %+v", got)
	}
	if got := percentiles(nil); got != (Percentiles{}) {
		t.Fatalf("percentiles(nil) = %+v", got)
	}
}

func TestReplaceDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"postgres://u:p@h:5432/postgres?sslmode=disable", "postgres://u:p@h:5432/x?sslmode=disable"},
		{"postgresql://h/db", "postgresql://h/x"},
		{"host=h user=u", "host=h user=u dbname=x"},
	}
	for _, tt := range tests {
		if got, err := replaceDatabase(tt.in, "x"); err != nil || got != tt.want {
			t.Errorf("replaceDatabase(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// BenchmarkTasks runs b.N queued build tasks (instant model, one
// write_file each) through the worker: the throughput scenario as a Go
// benchmark, for profiling with -cpuprofile.
func BenchmarkTasks(b *testing.B) {
	url := dbtest.NewURL(b)
	pool, err := pgxpool.New(b.Context(), url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	store, err := storage.NewLocal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{Store: store, StoreName: "local", Concurrency: 10}
	db := &database{url: url, pool: pool, drop: func() {}}
	if _, err := pool.Exec(b.Context(), `INSERT INTO ai_tasks (project_id, type, prompt)
		SELECT gen_random_uuid(), 'build', 'bench' FROM generate_series(1, $1)`, b.N); err != nil {
		b.Fatal(err)
	}
	opts.Logger = nil
	p, err := startPipeline(b.Context(), withDefaults(opts), db, instantModel(), false)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	if err := p.svc.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		select {
		case <-p.timed.done:
		case <-time.After(time.Minute):
			b.Fatal("a task took over a minute")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
	p.stop(context.Background())
}
