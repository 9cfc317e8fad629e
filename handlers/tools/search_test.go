package tools_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/testing/s3test"
)

type searchOutput struct {
	Matches []struct {
		Path string `json:"path"`
		Line int    `json:"line"`
		Text string `json:"text"`
	} `json:"matches"`
	Count         int    `json:"count"`
	Note          string `json:"note"`
	SkippedBinary int    `json:"skippedBinary"`
}

func search(t testing.TB, reg *tools.Registry, env tools.Env, args map[string]any) searchOutput {
	t.Helper()
	b, _ := json.Marshal(args)
	r := reg.Call(t.Context(), env, "search_files", string(b))
	if !r.Success {
		t.Fatalf("search_files %s: %s", b, r.Output)
	}
	var out searchOutput
	if err := json.Unmarshal([]byte(r.Output), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSearchFilesOrderLimitAndBinaries(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"logo.png":           "\x89PNG\r\n\x1a\nneedle",
		"data.bin":           "needle\x00\x01\x02",
		"node_modules/x.js":  "needle",
		"src/z.ts":           "needle z\n",
		"README.md":          "no match\n",
		"src/b/deep/last.ts": "x\nneedle deep\n",
	}
	for i := range 40 {
		files[fmt.Sprintf("src/a/f%02d.ts", i)] = fmt.Sprintf("one\nneedle %d\nneedle again %d\n", i, i)
	}
	reg, env := setup(t, files)

	all := search(t, reg, env, map[string]any{"query": "needle", "max_results": 200})
	var got []string
	for _, m := range all.Matches {
		got = append(got, fmt.Sprintf("%s:%d", m.Path, m.Line))
	}
	var want []string
	for i := range 40 {
		want = append(want, fmt.Sprintf("src/a/f%02d.ts:2", i), fmt.Sprintf("src/a/f%02d.ts:3", i))
	}
	want = append(want, "src/b/deep/last.ts:2", "src/z.ts:1")
	if !slices.Equal(got, want) {
		t.Errorf("matches =\n%v\nwant\n%v", got, want)
	}
	if all.SkippedBinary != 2 || all.Note != "" {
		t.Errorf("skippedBinary = %d, note %q; want 2 and none", all.SkippedBinary, all.Note)
	}

	// The first max_results matches in path order, every time.
	for range 5 {
		few := search(t, reg, env, map[string]any{"query": "needle", "max_results": 3})
		if len(few.Matches) != 3 || few.Matches[2].Path != "src/a/f01.ts" || few.Matches[2].Line != 2 || !strings.Contains(few.Note, "more results") {
			t.Fatalf("limited search = %+v", few)
		}
	}
}

// BenchmarkSearchFiles measures search_files over 2,000 small files in
// MinIO (1.6 s a search when files were read one by one). It reports the
// 99th percentile besides the mean.
func BenchmarkSearchFiles(b *testing.B) {
	store := s3test.NewStore(b)
	project := uuid.NewString()
	const n = 2000
	sem := make(chan struct{}, 32)
	errs := make(chan error, n)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			content := fmt.Sprintf("import { a } from './a'\nexport const value%d = %d\n// filler line\n", i, i)
			_, err := store.Write(b.Context(), project, fmt.Sprintf("src/mod%02d/file%04d.ts", i%40, i), []byte(content))
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	reg, err := tools.ForTaskType("build")
	if err != nil {
		b.Fatal(err)
	}
	// Cold: every file read from MinIO. Warm: a task's second search, with
	// unchanged files served from its cache.
	for _, warm := range []bool{false, true} {
		name := "Cold"
		if warm {
			name = "Warm"
		}
		b.Run(name, func(b *testing.B) {
			env := tools.Env{Store: store, ProjectID: project, Cache: tools.NewCache(32 << 20)}
			if warm {
				search(b, reg, env, map[string]any{"query": "value1999 ="})
			}
			var durations []time.Duration
			for b.Loop() {
				if !warm {
					env.Cache = nil
				}
				start := time.Now()
				// A query matching one line of the last file: every file is read.
				out := search(b, reg, env, map[string]any{"query": "value1999 ="})
				durations = append(durations, time.Since(start))
				if out.Count != 1 {
					b.Fatalf("count = %d, want 1", out.Count)
				}
			}
			slices.Sort(durations)
			p99 := durations[min(len(durations)-1, len(durations)*99/100)]
			b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
		})
	}
}
