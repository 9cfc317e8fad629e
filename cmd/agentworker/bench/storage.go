package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/agentworker/agentworker/handlers/projectctx"
	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/storage"
)

// runStorage measures building a task's context on projects of 200 and
// 2,000 files, and read_file / search_files / edit_file latency on the
// 2,000-file project, through the tool registry a build task uses.
func runStorage(ctx context.Context, opts Options, r *Report) error {
	small, err := seedProject(ctx, opts.Store, 200)
	if err != nil {
		return err
	}
	large, err := seedProject(ctx, opts.Store, 2000)
	if err != nil {
		return err
	}
	reps := 5
	if opts.Quick {
		reps = 2
	}
	if r.ContextBuildMS.Files200, err = contextBuildMS(ctx, opts.Store, small, reps); err != nil {
		return err
	}
	if r.ContextBuildMS.Files2000, err = contextBuildMS(ctx, opts.Store, large, reps); err != nil {
		return err
	}

	reg, err := tools.ForTaskType("build")
	if err != nil {
		return err
	}
	// As a task sees it: through the process-wide listing and file caches
	// (handlers.Runner's), so the first search lists the project and reads
	// every file, and later ones answer from the kept listing and read only
	// changed files. The listing cache runs on the bench's clock, so that
	// warm searches are measured within its max age and re-listed ones
	// past it, whatever the first search cost on a busy machine.
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	listings := storage.NewListCache(opts.Store, storage.ListCacheConfig{Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	defer listings.Close()
	env := tools.Env{Store: listings, ProjectID: large, Cache: tools.NewCache(64 << 20)}
	n := 200
	if opts.Quick {
		n = 40
	}
	call1 := func(name string, args any) (float64, error) {
		raw, _ := json.Marshal(args)
		t0 := time.Now()
		res := reg.Call(ctx, env, name, string(raw))
		took := time.Since(t0)
		if !res.Success {
			return 0, fmt.Errorf("%s: %s", name, res.Output)
		}
		return float64(took.Microseconds()) / 1000, nil
	}
	call := func(name string, args func(i int) any) (Percentiles, error) {
		var samples []time.Duration
		for i := range n {
			ms, err := call1(name, args(i))
			if err != nil {
				return Percentiles{}, err
			}
			samples = append(samples, time.Duration(ms*float64(time.Millisecond)))
		}
		return percentiles(samples), nil
	}
	if r.ToolCallMS.Read, err = call("read_file", func(i int) any {
		return map[string]any{"path": benchFile(i % 2000)}
	}); err != nil {
		return err
	}
	searchArgs := func(i int) any { return map[string]any{"query": fmt.Sprintf("Component%d\\b", i), "path": "src"} }
	cold, err := call1("search_files", searchArgs(n))
	if err != nil {
		return err
	}
	r.ToolCallMS.SearchCold = cold
	if r.ToolCallMS.Search, err = call("search_files", searchArgs); err != nil {
		return err
	}
	if r.ToolCallMS.SearchStale, err = call("search_files", func(i int) any {
		// A model turn between searches: the last background listing has
		// finished, and the kept one is past RefreshAfter again.
		listings.WaitRefreshes()
		clock.Add(int64(10 * time.Second))
		return searchArgs(i)
	}); err != nil {
		return err
	}
	listings.WaitRefreshes()
	if r.ToolCallMS.SearchRelisted, err = call("search_files", func(i int) any {
		clock.Add(int64(time.Minute)) // past the max age: listed again
		return searchArgs(i)
	}); err != nil {
		return err
	}
	if reg.Has("edit_file") {
		if r.ToolCallMS.Edit, err = call("edit_file", func(i int) any {
			return map[string]any{"path": benchFile(i % 2000), "old_string": fmt.Sprintf("value: %d,", i%2000), "new_string": fmt.Sprintf("value: %d, // edited", i%2000)}
		}); err != nil {
			return err
		}
	} else {
		r.note("edit_file is not in this build's tool set; edit latency not measured")
	}
	r.note("storage figures on the %s store; search_files cold is the first search (the project listed, every file read), warm the %d after it (from the kept listing and the file cache), %d more 10 s apart (the listing refreshed in the background), re-listed %d more with the kept listing past its max age (listed again, files from the cache)", opts.StoreName, n, n, n)
	return nil
}

func benchFile(i int) string {
	return fmt.Sprintf("src/components/group%02d/Component%d.tsx", i%40, i)
}

// seedProject writes n small TypeScript files into a new project.
func seedProject(ctx context.Context, store storage.Store, n int) (string, error) {
	project := uuid.NewString()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			var b strings.Builder
			fmt.Fprintf(&b, "import React from 'react';\n\nexport const config = {\n  value: %d,\n};\n\n", i)
			fmt.Fprintf(&b, "export function Component%d() {\n  return <div className=\"c%d\">Component %d</div>;\n}\n", i, i, i)
			_, err := store.Write(gctx, project, benchFile(i), []byte(b.String()))
			return err
		})
	}
	g.Go(func() error {
		_, err := store.Write(gctx, project, "package.json", []byte(`{"name":"bench","dependencies":{"react":"^19.0.0"}}`))
		return err
	})
	if err := g.Wait(); err != nil {
		return "", fmt.Errorf("seed a %d-file project: %w", n, err)
	}
	return project, nil
}

// contextBuildMS is the median time to build a task's context: what the
// runner's load_context stage does (projectctx.Build with its defaults).
func contextBuildMS(ctx context.Context, store storage.Store, project string, reps int) (float64, error) {
	var samples []time.Duration
	for range reps {
		t0 := time.Now()
		if _, err := projectctx.Build(ctx, store, project, projectctx.Options{}); err != nil {
			return 0, err
		}
		samples = append(samples, time.Since(t0))
	}
	return percentiles(samples).P50, nil
}
