package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/changeset"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/s3test"
	"github.com/agentworker/agentworker/testing/testclock"
)

type searchOutput struct {
	Matches []struct {
		Path string `json:"path"`
		Line int    `json:"line"`
		Text string `json:"text"`
	} `json:"matches"`
	Count                 int    `json:"count"`
	Note                  string `json:"note"`
	SkippedBinary         int    `json:"skippedBinary"`
	FilesListedSecondsAgo int    `json:"filesListedSecondsAgo"`
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
			env := tools.Env{Store: store, ProjectID: project}
			if warm {
				// As the runner's tasks search: the kept listing and the file cache.
				env = tools.Env{Store: storage.NewListCache(store, storage.ListCacheConfig{}), ProjectID: project, Cache: tools.NewCache(32 << 20)}
				search(b, reg, env, map[string]any{"query": "value1999 ="})
			}
			var durations []time.Duration
			for b.Loop() {
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

// countingStore counts the listings a search asks its store for.
type countingStore struct {
	storage.Store
	lists atomic.Int64
}

func (c *countingStore) List(ctx context.Context, projectID, dir string) ([]storage.FileInfo, error) {
	c.lists.Add(1)
	return c.Store.List(ctx, projectID, dir)
}

// indexed is a project in MinIO searched two ways: through the
// process-wide index a task gets (a ListCache on a test clock, and the
// file cache), and straight from the store (no index at all).
type indexed struct {
	reg     *tools.Registry
	store   *storage.S3
	counted *countingStore
	clock   *testclock.Clock
	env     tools.Env // with the index
	bare    tools.Env // without
}

const listingMaxAge = 5 * time.Second

func setupIndexed(t *testing.T, files map[string]string) *indexed {
	t.Helper()
	ix := &indexed{store: s3test.NewStore(t), clock: testclock.New(time.Now())}
	project := uuid.NewString()
	for p, c := range files {
		if _, err := ix.store.Write(t.Context(), project, p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	ix.counted = &countingStore{Store: ix.store}
	cached := storage.NewListCache(ix.counted, storage.ListCacheConfig{MaxAge: listingMaxAge, Now: ix.clock.Now})
	ix.env = tools.Env{Store: cached, ProjectID: project, Cache: tools.NewCache(8 << 20)}
	ix.bare = tools.Env{Store: ix.store, ProjectID: project}
	var err error
	if ix.reg, err = tools.ForTaskType("build"); err != nil {
		t.Fatal(err)
	}
	return ix
}

func searchRaw(t *testing.T, reg *tools.Registry, env tools.Env, args map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(args)
	r := reg.Call(t.Context(), env, "search_files", string(b))
	return fmt.Sprintf("success=%v %s", r.Success, r.Output)
}

// checkSame searches with and without the index and wants the same answer.
func (ix *indexed) checkSame(t *testing.T, args map[string]any) string {
	t.Helper()
	want := searchRaw(t, ix.reg, ix.bare, args)
	got := searchRaw(t, ix.reg, ix.env, args)
	if got != want {
		t.Errorf("search %v with the index:\n%s\nwithout:\n%s", args, got, want)
	}
	return got
}

// TestSearchFilesIndexedSameAsUnindexed: for a table of queries, the index
// (a kept listing, cached contents, the literal-prefix skip) answers
// exactly what reading every file from the store answers, cold and warm.
func TestSearchFilesIndexedSameAsUnindexed(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"README.md":                  "# Needle\nneedle in the readme\n\nlast line without newline needle",
		"src/a.ts":                   "const needle = 1;\r\nconst other = 2;\r\nneedle\r\n",
		"src/b/deep.ts":              "x\n\nneedle deep\nnext\n",
		"src/unicode.ts":             "// naïve café needle\nconst é = 'needle';\n",
		"src/long.ts":                strings.Repeat("a", 500) + " needle " + strings.Repeat("b", 500) + "\n",
		"src/empty.ts":               "",
		"src/big.ts":                 strings.Repeat("needle\n", (1<<20)/7+10), // over the 1 MiB search limit
		"src/nul.ts":                 "needle\x00\x01",
		"src/latin1.txt":             "caf\xe9 needle\n",
		"logo.png":                   "\x89PNG needle",
		"node_modules/pkg/index.js":  "needle",
		"dist/out.js":                "needle",
		"docs/a.b.md":                "a.b and axb\n",
		"docs/multi.md":              "needle\nnext\nneedle\nnext\n",
		"src/components/Button.tsx":  "export function Button() {}\nexport const ButtonProps = {}\n",
		"src/components/Button2.tsx": "export function Button2() {}\n",
	}
	for i := range 30 {
		files[fmt.Sprintf("src/gen/f%02d.ts", i)] = fmt.Sprintf("line\nneedle %d\n", i)
	}
	ix := setupIndexed(t, files)
	queries := []map[string]any{
		{"query": "needle"},
		{"query": "needle", "max_results": 3},
		{"query": "needle", "max_results": 200},
		{"query": "^needle"},
		{"query": "needle$"},
		{"query": `needle\r$`},
		{"query": "(?i)NEEDLE"},
		{"query": `\Aneedle`},
		{"query": `needle\z`},
		{"query": "^$"},
		{"query": "x{0}", "max_results": 200},
		{"query": `needle\nnext`},
		{"query": "ne+dle|café"},
		{"query": "é"},
		{"query": `[^\x00-\x7f]`},
		{"query": "a.b", "literal": true},
		{"query": "a.b"},
		{"query": `Button\b`},
		{"query": "Button", "glob": "*.tsx"},
		{"query": "needle", "path": "src/b"},
		{"query": "needle", "path": "src/gen", "max_results": 5},
		{"query": "needle", "path": "node_modules"},
		{"query": "needle", "glob": "node_modules"},
		{"query": "needle", "path": "absent"},
		{"query": "nothing matches this"},
		{"query": "("},
		{"query": "needle", "path": "../x"},
	}
	for round := range 2 { // cold, then warm
		for _, q := range queries {
			got := ix.checkSame(t, q)
			if _, narrowed := q["path"]; narrowed || q["glob"] != nil || q["max_results"] != nil || q["literal"] != nil {
				continue
			}
			want := referenceSearch(t, files, q["query"].(string))
			if want == nil {
				continue
			}
			var out searchOutput
			if err := json.Unmarshal([]byte(strings.TrimPrefix(got, "success=true ")), &out); err != nil {
				t.Fatalf("search %v: %s", q, got)
			}
			found := []string{}
			for _, m := range out.Matches {
				found = append(found, fmt.Sprintf("%s:%d", m.Path, m.Line))
			}
			if !slices.Equal(found, want) {
				t.Errorf("search %v found %v, want those of a line-by-line search: %v", q, found, want)
			}
		}
		if round == 0 && ix.counted.lists.Load() != 1 {
			t.Errorf("cold round listed the store %d times, want once", ix.counted.lists.Load())
		}
	}
	if n := ix.counted.lists.Load(); n != 1 {
		t.Errorf("%d searches listed the store %d times, want once (the listing is kept for %v)", 2*len(queries), n, listingMaxAge)
	}
}

// TestSearchFilesSeesChanges: the next search after a change shows it. A
// change made through the task's own tools shows at once; one made
// straight to the store shows once the kept listing is its max age old,
// and until then the answer says how old its file list is.
func TestSearchFilesSeesChanges(t *testing.T) {
	t.Parallel()
	ix := setupIndexed(t, map[string]string{
		"src/a.ts": "alpha needle\n",
		"src/b.ts": "beta needle\n",
		"src/c.ts": "gamma\n",
	})
	matches := func() []string {
		t.Helper()
		out := search(t, ix.reg, ix.env, map[string]any{"query": "needle"})
		var got []string
		for _, m := range out.Matches {
			got = append(got, m.Path+": "+m.Text)
		}
		return got
	}
	call := func(tool string, args map[string]any) {
		t.Helper()
		b, _ := json.Marshal(args)
		if r := ix.reg.Call(t.Context(), ix.env, tool, string(b)); !r.Success {
			t.Fatalf("%s: %s", tool, r.Output)
		}
	}
	check := func(step string, want ...string) {
		t.Helper()
		if got := matches(); !slices.Equal(got, want) {
			t.Errorf("%s: matches %q, want %q", step, got, want)
		}
	}
	check("first", "src/a.ts: alpha needle", "src/b.ts: beta needle")

	// Through the tools: at once.
	call("edit_file", map[string]any{"path": "src/a.ts", "old_string": "alpha", "new_string": "ALPHA"})
	check("edited", "src/a.ts: ALPHA needle", "src/b.ts: beta needle")
	call("write_file", map[string]any{"path": "src/d.ts", "content": "delta needle\n"})
	check("added", "src/a.ts: ALPHA needle", "src/b.ts: beta needle", "src/d.ts: delta needle")
	call("delete_file", map[string]any{"path": "src/b.ts"})
	check("deleted", "src/a.ts: ALPHA needle", "src/d.ts: delta needle")
	call("move_file", map[string]any{"fromPath": "src/d.ts", "toPath": "src/e.ts"})
	check("moved", "src/a.ts: ALPHA needle", "src/e.ts: delta needle")
	lists := ix.counted.lists.Load()

	// Straight to the store: changed, added and deleted.
	ctx := t.Context()
	project := ix.env.ProjectID
	if _, err := ix.store.Write(ctx, project, "src/a.ts", []byte("changed needle\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.store.Write(ctx, project, "src/c.ts", []byte("gamma needle\n")); err != nil {
		t.Fatal(err)
	}
	if err := ix.store.Delete(ctx, project, "src/e.ts"); err != nil {
		t.Fatal(err)
	}
	ix.clock.Advance(2 * time.Second)
	out := search(t, ix.reg, ix.env, map[string]any{"query": "needle"})
	if out.FilesListedSecondsAgo != 2 {
		t.Errorf("a search from a 2 s old listing says filesListedSecondsAgo %d, want 2", out.FilesListedSecondsAgo)
	}
	if ix.counted.lists.Load() != lists {
		t.Errorf("a search within the max age listed the store")
	}
	ix.clock.Advance(listingMaxAge)
	check("changed outside", "src/a.ts: changed needle", "src/c.ts: gamma needle")
	if out := search(t, ix.reg, ix.env, map[string]any{"query": "needle"}); out.FilesListedSecondsAgo != 0 {
		t.Errorf("a search from a new listing says filesListedSecondsAgo %d", out.FilesListedSecondsAgo)
	}
}

// TestSearchFilesInBuild: a build searches its change set: its staged
// changes show at once over the kept listing, and once applied (through
// the process's ListCache) they show to every task without a new listing.
func TestSearchFilesInBuild(t *testing.T) {
	t.Parallel()
	ix := setupIndexed(t, map[string]string{"src/a.ts": "alpha needle\n", "src/b.ts": "beta needle\n"})
	pool := dbtest.New(t)
	projectID := uuid.MustParse(ix.env.ProjectID)
	set, _, err := changeset.Open(t.Context(), pool, ix.env.Store, dbtest.HeldBuild(t, pool, projectID, "x"), projectID)
	if err != nil {
		t.Fatal(err)
	}
	build := ix.env
	build.Store = set
	paths := func(env tools.Env) []string {
		var got []string
		for _, m := range search(t, ix.reg, env, map[string]any{"query": "needle"}).Matches {
			got = append(got, m.Path)
		}
		return got
	}
	if got := paths(build); !slices.Equal(got, []string{"src/a.ts", "src/b.ts"}) {
		t.Fatalf("before the build's changes: %v", got)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"write_file", map[string]any{"path": "src/c.ts", "content": "staged needle\n"}},
		{"delete_file", map[string]any{"path": "src/a.ts"}},
	} {
		b, _ := json.Marshal(c.args)
		if r := ix.reg.Call(t.Context(), build, c.tool, string(b)); !r.Success {
			t.Fatalf("%s: %s", c.tool, r.Output)
		}
	}
	want := []string{"src/b.ts", "src/c.ts"}
	if got := paths(build); !slices.Equal(got, want) {
		t.Errorf("the build sees %v, want its staged changes: %v", got, want)
	}
	if got := paths(ix.env); !slices.Equal(got, []string{"src/a.ts", "src/b.ts"}) {
		t.Errorf("another task sees %v before the apply, want the project as stored", got)
	}
	if _, err := set.Apply(t.Context(), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	lists := ix.counted.lists.Load()
	if got := paths(ix.env); !slices.Equal(got, want) {
		t.Errorf("another task sees %v after the apply, want %v", got, want)
	}
	if ix.counted.lists.Load() != lists {
		t.Errorf("a search after the apply listed the store again")
	}
}

// referenceSearch is search_files as first written, for the whole project
// and the default limit: every line of every searchable file, split and
// matched one by one. nil when the query does not compile.
func referenceSearch(t *testing.T, files map[string]string, query string) []string {
	t.Helper()
	re, err := regexp.Compile(query)
	if err != nil {
		return nil
	}
	var names []string
	for p, c := range files {
		top, _, _ := strings.Cut(p, "/")
		if top == "node_modules" || top == "dist" || path.Ext(p) == ".png" || len(c) > 1<<20 || strings.Contains(c[:min(len(c), 8<<10)], "\x00") {
			continue
		}
		names = append(names, p)
	}
	slices.Sort(names)
	out := []string{}
	for _, p := range names {
		for i, line := range strings.Split(files[p], "\n") {
			if re.MatchString(line) && len(out) < 50 {
				out = append(out, fmt.Sprintf("%s:%d", p, i+1))
			}
		}
	}
	return out
}
