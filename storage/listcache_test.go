package storage_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/storagetest"
	"github.com/agentworker/agentworker/testing/s3test"
	"github.com/agentworker/agentworker/testing/testclock"
)

// recentOnly is a ListCache whose List is its ListRecent, with a clock
// that never moves: every listing after the first is the kept one, kept
// current by the writes made through the cache alone.
type recentOnly struct{ *storage.ListCache }

func (r recentOnly) List(ctx context.Context, projectID, dir string) ([]storage.FileInfo, error) {
	files, _, err := r.ListRecent(ctx, projectID, dir)
	return files, err
}

// TestListCacheConformance runs the Store contract over a ListCache, once
// as it is and once answering every listing from the kept one: a write,
// delete or move through the cache leaves the kept listing exactly as the
// store's own would be.
func TestListCacheConformance(t *testing.T) {
	t.Parallel()
	frozen := time.Now()
	for _, recent := range []bool{false, true} {
		t.Run(fmt.Sprintf("Recent=%v", recent), func(t *testing.T) {
			t.Parallel()
			storagetest.Run(t, func(t *testing.T) storage.Store {
				t.Helper()
				c := storage.NewListCache(s3test.NewStore(t), storage.ListCacheConfig{Now: func() time.Time { return frozen }})
				if recent {
					return recentOnly{c}
				}
				return c
			})
		})
	}
}

func paths(files []storage.FileInfo) []string {
	var out []string
	for _, f := range files {
		out = append(out, f.Path+"@"+f.ETag)
	}
	return out
}

func checkRecent(t *testing.T, c *storage.ListCache, project, dir string, wantAge time.Duration, want []storage.FileInfo) {
	t.Helper()
	got, age, err := c.ListRecent(t.Context(), project, dir)
	if err != nil {
		t.Fatalf("ListRecent(%q): %v", dir, err)
	}
	if age != wantAge || !slices.Equal(paths(got), paths(want)) {
		t.Errorf("ListRecent(%q) = %v, age %v; want %v, age %v", dir, paths(got), age, paths(want), wantAge)
	}
}

// TestListCacheFreshness: within MaxAge ListRecent sends nothing to S3 and
// shows what was written through the cache; a write straight to the
// bucket shows once the kept listing is MaxAge old.
func TestListCacheFreshness(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s3, requests := countedS3(t)
	clk := testclock.New(time.Now())
	c := storage.NewListCache(s3, storage.ListCacheConfig{MaxAge: 5 * time.Second, Now: clk.Now})
	const project = "p"
	storagetest.Write(t, c, project, "src/a.ts", "a")
	storagetest.Write(t, c, project, "src/b.ts", "b")
	storagetest.Write(t, c, project, "README.md", "r")
	requests.take()

	whole, err := c.List(ctx, project, "")
	if err != nil {
		t.Fatal(err)
	}
	if sent := requests.take(); len(sent) != 1 {
		t.Fatalf("List sent %v, want one request", sent)
	}
	clk.Advance(time.Second)
	checkRecent(t, c, project, "src", time.Second, whole[1:])
	checkRecent(t, c, project, "", time.Second, whole)
	if sent := requests.take(); len(sent) != 0 {
		t.Fatalf("ListRecent within MaxAge sent %v, want nothing", sent)
	}

	// Through the cache: at once, without a listing.
	b2 := storagetest.Write(t, c, project, "src/b.ts", "b2")
	added := storagetest.Write(t, c, project, "src/c.ts", "c")
	if err := c.Delete(ctx, project, "src/a.ts"); err != nil {
		t.Fatal(err)
	}
	requests.take()
	checkRecent(t, c, project, "src", time.Second, []storage.FileInfo{b2, added})
	if sent := requests.take(); len(sent) != 0 {
		t.Fatalf("ListRecent after writes through the cache sent %v, want nothing", sent)
	}

	// Straight to the bucket: seen once the listing is MaxAge old.
	outside := storagetest.Write(t, s3, project, "src/d.ts", "d")
	checkRecent(t, c, project, "src", time.Second, []storage.FileInfo{b2, added})
	clk.Advance(4*time.Second + time.Millisecond)
	checkRecent(t, c, project, "src", 0, []storage.FileInfo{b2, added, outside})

	// A move drops the kept listing: the target's version is not known.
	if err := c.Move(ctx, project, "src/c.ts", "src/e.ts", false); err != nil {
		t.Fatal(err)
	}
	requests.take()
	got, _, err := c.ListRecent(ctx, project, "src")
	if err != nil {
		t.Fatal(err)
	}
	if sent := requests.take(); len(sent) != 1 || len(got) != 3 || got[2].Path != "src/e.ts" {
		t.Errorf("ListRecent after a move = %v, sent %v; want a new listing with src/e.ts", paths(got), sent)
	}

	// A refused write says the file changed meanwhile: the kept listing goes.
	if _, err := c.WriteIf(ctx, project, "src/b.ts", []byte("x"), "stale-version"); err == nil {
		t.Fatal("WriteIf against a stale version succeeded")
	}
	requests.take()
	if _, _, err := c.ListRecent(ctx, project, ""); err != nil {
		t.Fatal(err)
	}
	if sent := requests.take(); len(sent) != 1 {
		t.Errorf("ListRecent after a refused write sent %v, want one listing", sent)
	}
}

// TestListCacheRefreshInBackground: past RefreshAfter ListRecent answers
// from the kept listing at once, saying its age, while one background
// listing refreshes it; past MaxAge it lists before answering.
func TestListCacheRefreshInBackground(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s3, requests := countedS3(t)
	clk := testclock.New(time.Now())
	c := storage.NewListCache(s3, storage.ListCacheConfig{RefreshAfter: 5 * time.Second, MaxAge: 30 * time.Second, Now: clk.Now})
	t.Cleanup(c.Close)
	const project = "p"
	a := storagetest.Write(t, s3, project, "a.ts", "a")
	requests.take()
	checkRecent(t, c, project, "", 0, []storage.FileInfo{a})

	outside := storagetest.Write(t, s3, project, "b.ts", "b")
	requests.take()
	clk.Advance(6 * time.Second)
	for range 3 { // one background listing, however many ask
		checkRecent(t, c, project, "", 6*time.Second, []storage.FileInfo{a})
	}
	c.WaitRefreshes()
	if sent := requests.take(); len(sent) != 1 {
		t.Errorf("three ListRecent past RefreshAfter sent %v, want one listing", sent)
	}
	checkRecent(t, c, project, "", 0, []storage.FileInfo{a, outside})
	if sent := requests.take(); len(sent) != 0 {
		t.Errorf("ListRecent after the background listing sent %v, want nothing", sent)
	}

	// Past MaxAge: listed before answering.
	gone := storagetest.Write(t, s3, project, "c.ts", "c")
	if err := s3.Delete(ctx, project, gone.Path); err != nil {
		t.Fatal(err)
	}
	changed := storagetest.Write(t, s3, project, "a.ts", "a2")
	requests.take()
	clk.Advance(31 * time.Second)
	checkRecent(t, c, project, "", 0, []storage.FileInfo{changed, outside})
	if sent := requests.take(); len(sent) != 1 {
		t.Errorf("ListRecent past MaxAge sent %v, want one listing", sent)
	}

	// Closed: no background listing, the foreground one still answers.
	c.Close()
	clk.Advance(6 * time.Second)
	checkRecent(t, c, project, "", 6*time.Second, []storage.FileInfo{changed, outside})
	c.WaitRefreshes()
	if sent := requests.take(); len(sent) != 0 {
		t.Errorf("ListRecent past RefreshAfter on a closed cache sent %v, want nothing", sent)
	}
}

// TestListCacheBounds: projects' listings stay apart, at most MaxProjects
// are kept, and a project past MaxFiles is listed every time.
func TestListCacheBounds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s3, requests := countedS3(t)
	clk := testclock.New(time.Now())
	c := storage.NewListCache(s3, storage.ListCacheConfig{MaxProjects: 2, MaxFiles: 2, Now: clk.Now})
	a1 := storagetest.Write(t, s3, "a", "x.ts", "a")
	b1 := storagetest.Write(t, s3, "b", "x.ts", "b")
	storagetest.Write(t, s3, "big", "1.ts", "1")
	storagetest.Write(t, s3, "big", "2.ts", "2")
	storagetest.Write(t, s3, "big", "3.ts", "3")
	requests.take()

	for range 2 {
		checkRecent(t, c, "a", "", 0, []storage.FileInfo{a1})
		checkRecent(t, c, "b", "", 0, []storage.FileInfo{b1})
	}
	if sent := requests.take(); len(sent) != 2 {
		t.Errorf("two projects listed twice sent %v, want one listing each", sent)
	}
	for range 2 {
		if _, _, err := c.ListRecent(ctx, "big", ""); err != nil {
			t.Fatal(err)
		}
	}
	if sent := requests.take(); len(sent) != 2 {
		t.Errorf("a project past MaxFiles listed twice sent %v, want two listings", sent)
	}
	c1 := storagetest.Write(t, s3, "c", "x.ts", "c")
	requests.take()
	checkRecent(t, c, "c", "", 0, []storage.FileInfo{c1})
	// big's entry (its listing past MaxFiles, not kept) and a's, the
	// oldest listing, made room for c's.
	checkRecent(t, c, "a", "", 0, []storage.FileInfo{a1})
	if sent := requests.take(); len(sent) != 2 {
		t.Errorf("a third project sent %v, want its listing and a's again", sent)
	}
	// A write through the cache that takes a kept listing past MaxFiles
	// drops it, as a listing past MaxFiles is not kept.
	a2 := storagetest.Write(t, c, "a", "y.ts", "y")
	a3 := storagetest.Write(t, c, "a", "z.ts", "z")
	requests.take()
	checkRecent(t, c, "a", "", 0, []storage.FileInfo{a1, a2, a3})
	if sent := requests.take(); len(sent) != 1 {
		t.Errorf("a past MaxFiles by a write sent %v, want a listing", sent)
	}
}

// TestListCacheKeepsAWorkersProjects: a worker running 200 tasks, each on
// a project of its own, keeps each task's listing from its start (the
// context's listing) to its checks (ListRecent). The default bound was 64
// projects: every build listed its project twice.
func TestListCacheKeepsAWorkersProjects(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s3, requests := countedS3(t)
	c := storage.NewListCache(s3, storage.ListCacheConfig{})
	projects := make([]string, 200)
	for i := range projects {
		projects[i] = fmt.Sprintf("p%03d", i)
		storagetest.Write(t, s3, projects[i], "x.ts", projects[i])
	}
	requests.take()
	for _, p := range projects {
		if _, err := c.List(ctx, p, ""); err != nil {
			t.Fatal(err)
		}
	}
	if sent := requests.take(); len(sent) != len(projects) {
		t.Fatalf("listing %d projects sent %d requests", len(projects), len(sent))
	}
	for _, p := range projects {
		if _, _, err := c.ListRecent(ctx, p, ""); err != nil {
			t.Fatal(err)
		}
	}
	if sent := requests.take(); len(sent) != 0 {
		t.Errorf("ListRecent of %d projects just listed sent %d listings, want none", len(projects), len(sent))
	}
}

// TestListCacheMaxKeptFiles: the kept listings together hold at most
// MaxKeptFiles files; the oldest make room, a write that grows a listing
// included.
func TestListCacheMaxKeptFiles(t *testing.T) {
	t.Parallel()
	s3, requests := countedS3(t)
	clk := testclock.New(time.Now())
	c := storage.NewListCache(s3, storage.ListCacheConfig{MaxFiles: 2, MaxKeptFiles: 3, Now: clk.Now})
	a := storagetest.Write(t, s3, "a", "x.ts", "a")
	b1 := storagetest.Write(t, s3, "b", "1.ts", "1")
	b2 := storagetest.Write(t, s3, "b", "2.ts", "2")
	d := storagetest.Write(t, s3, "d", "x.ts", "d")
	requests.take()
	checkRecent(t, c, "a", "", 0, []storage.FileInfo{a})
	clk.Advance(time.Millisecond)
	checkRecent(t, c, "b", "", 0, []storage.FileInfo{b1, b2})
	if sent := requests.take(); len(sent) != 2 {
		t.Fatalf("listing a and b sent %v, want a listing each", sent)
	}
	// 3 files kept: d's makes room by dropping a's, the oldest.
	clk.Advance(time.Millisecond)
	checkRecent(t, c, "d", "", 0, []storage.FileInfo{d})
	checkRecent(t, c, "b", "", time.Millisecond, []storage.FileInfo{b1, b2})
	if sent := requests.take(); len(sent) != 1 {
		t.Errorf("d then b sent %v, want d's listing only", sent)
	}
	// a listed again drops b's (now the oldest), b's drops d's.
	checkRecent(t, c, "a", "", 0, []storage.FileInfo{a})
	clk.Advance(time.Millisecond)
	checkRecent(t, c, "b", "", 0, []storage.FileInfo{b1, b2})
	if sent := requests.take(); len(sent) != 2 {
		t.Errorf("a then b after d sent %v, want a listing each", sent)
	}
	// A write through the cache grows a's listing past the bound: the
	// oldest other listing (b's) makes room, a's stays.
	a2 := storagetest.Write(t, c, "a", "y.ts", "y")
	requests.take()
	checkRecent(t, c, "a", "", time.Millisecond, []storage.FileInfo{a, a2})
	if sent := requests.take(); len(sent) != 0 {
		t.Errorf("a after its write sent %v, want nothing", sent)
	}
	checkRecent(t, c, "b", "", 0, []storage.FileInfo{b1, b2})
	if sent := requests.take(); len(sent) != 1 {
		t.Errorf("b after a's write sent %v, want b's listing again", sent)
	}
}

// blockingList holds the store's first listing (of project, or of any
// project when it is "") until release is closed; the others pass.
type blockingList struct {
	storage.Store
	project string
	started chan struct{}
	release chan struct{}
	held    atomic.Bool
}

func (b *blockingList) List(ctx context.Context, projectID, dir string) ([]storage.FileInfo, error) {
	files, err := b.Store.List(ctx, projectID, dir)
	if (b.project == "" || projectID == b.project) && b.held.CompareAndSwap(false, true) {
		close(b.started)
		<-b.release
	}
	return files, err
}

// TestListCacheWriteDuringListing: a listing that a write through the
// cache overlapped may not show the write, so it is not kept.
func TestListCacheWriteDuringListing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s3 := s3test.NewStore(t)
	storagetest.Write(t, s3, "p", "a.ts", "a")
	slow := &blockingList{Store: s3, started: make(chan struct{}), release: make(chan struct{})}
	c := storage.NewListCache(slow, storage.ListCacheConfig{})
	done := make(chan error)
	go func() {
		_, err := c.List(ctx, "p", "")
		done <- err
	}()
	<-slow.started
	written := storagetest.Write(t, c, "p", "b.ts", "b")
	close(slow.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, _, err := c.ListRecent(ctx, "p", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || paths(got)[1] != written.Path+"@"+written.ETag {
		t.Errorf("ListRecent after a write during a listing = %v, want a.ts and b.ts", paths(got))
	}
}

// TestListCacheListingOutlastsEvictions: other projects' listings that
// make room while a project's listing is under way neither drop that
// listing nor let it hide a write that overlapped it. (Every listing that
// overlapped any eviction was dropped, so a worker building one new
// project after another kept none and listed each twice.)
func TestListCacheListingOutlastsEvictions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, write := range []bool{false, true} {
		s3, requests := countedS3(t)
		clk := testclock.New(time.Now())
		slow := &blockingList{Store: s3, project: "p", started: make(chan struct{}), release: make(chan struct{})}
		c := storage.NewListCache(slow, storage.ListCacheConfig{MaxProjects: 2, Now: clk.Now})
		a := storagetest.Write(t, s3, "p", "a.ts", "a")
		for _, q := range []string{"q", "r", "s"} {
			storagetest.Write(t, s3, q, "x.ts", q)
		}
		done := make(chan error)
		go func() {
			_, err := c.List(ctx, "p", "")
			done <- err
		}()
		<-slow.started
		for _, q := range []string{"q", "r", "s"} {
			if _, err := c.List(ctx, q, ""); err != nil {
				t.Fatal(err)
			}
		}
		want := []storage.FileInfo{a}
		if write {
			want = append(want, storagetest.Write(t, c, "p", "b.ts", "b"))
		}
		close(slow.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		requests.take()
		checkRecent(t, c, "p", "", 0, want)
		// Without the write the listing is kept; with it, listed again.
		if sent := requests.take(); write != (len(sent) == 1) || len(sent) > 1 {
			t.Errorf("write %t: ListRecent after the listing sent %v", write, sent)
		}
	}
}
