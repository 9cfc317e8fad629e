package storage

import (
	lru "container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// RecentLister is a Store that can answer a listing from one it took a
// little while ago, for callers that accept that (search_files): a
// listing of a 2,000-file project costs an object store 100–200 ms.
type RecentLister interface {
	// ListRecent is List as it was age ago: a file written since by anyone
	// but this store may be missing from it or shown at its older version.
	ListRecent(ctx context.Context, projectID, dir string) (files []FileInfo, age time.Duration, err error)
}

// Lister is the part of a Store that lists.
type Lister interface {
	List(ctx context.Context, projectID, dir string) ([]FileInfo, error)
}

// ListRecent lists dir with s's ListRecent when s is a RecentLister, else
// with List (age 0).
func ListRecent(ctx context.Context, s Lister, projectID, dir string) ([]FileInfo, time.Duration, error) {
	if r, ok := s.(RecentLister); ok {
		return r.ListRecent(ctx, projectID, dir)
	}
	files, err := s.List(ctx, projectID, dir)
	return files, 0, err
}

// ListCacheConfig bounds a ListCache.
type ListCacheConfig struct {
	// MaxAge is how old a listing ListRecent answers from may be; an older
	// one is listed again before it answers. Defaults to 30 seconds.
	MaxAge time.Duration
	// RefreshAfter: a kept listing older than this (and at most MaxAge
	// old) answers ListRecent at once while one listing in the background
	// refreshes it, so a search costs no listing however far apart a
	// task's searches are. Defaults to 5 seconds, at most MaxAge.
	RefreshAfter time.Duration
	// MaxProjects is how many projects' listings are kept; the oldest
	// listing makes room. Defaults to 4,096: a worker running hundreds of
	// tasks on as many projects keeps each task's listing from its start
	// to its finish (at 64, each build listed its project twice).
	MaxProjects int
	// MaxFiles is the most files a kept listing holds: a larger project is
	// listed every time. Defaults to 50,000 (about 10 MiB).
	MaxFiles int
	// MaxKeptFiles is the most files all kept listings hold together; the
	// oldest listings make room. Defaults to 250,000 (about 50 MiB), at
	// least MaxFiles.
	MaxKeptFiles int
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// ListCache is a Store that keeps each project's last whole listing, for
// ListRecent. Its freshness rule:
//   - every whole-project List refreshes the kept listing (a task's context
//     lists the project when the task starts);
//   - a write, delete or move through the ListCache updates the kept
//     listing at once (a build's apply, in this process), or drops it when
//     the outcome is not known exactly (an error, a move);
//   - any other change (another replica, a write straight to the bucket) is
//     seen by ListRecent once a listing taken after it is kept: the first
//     ListRecent past RefreshAfter starts one in the background, and none
//     answers from a listing older than MaxAge.
//
// Listings are kept per project and never answer for another. It is safe
// for concurrent use.
type ListCache struct {
	Store
	cfg ListCacheConfig

	mu       sync.Mutex
	projects map[string]*keptListing
	// order holds the entries, those without a listing first, then by
	// when their listing was kept, oldest first: eviction's order.
	order *lru.List
	files int    // files of all kept listings
	seq   uint64 // numbers writes: a listing that overlapped one is not kept

	// Background listings: bounded by refreshTimeout, stopped by Close.
	bg         context.Context
	stop       context.CancelFunc
	refreshing sync.WaitGroup
}

// refreshTimeout bounds a background listing.
const refreshTimeout = 30 * time.Second

type keptListing struct {
	project string
	elem    *lru.Element // in ListCache.order
	files   []FileInfo   // sorted by path; replaced, never changed in place
	at      time.Time    // zero: no listing kept, only the generation
	gen     uint64       // seq of the project's last write through the cache
	// refreshing: a background listing of the project is under way.
	refreshing bool
	// listings under way: the entry is not evicted meanwhile, so that gen
	// tells each of them whether a write overlapped it.
	listings int
}

// NewListCache returns s with its listings kept as cfg says.
func NewListCache(s Store, cfg ListCacheConfig) *ListCache {
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = 30 * time.Second
	}
	if cfg.RefreshAfter <= 0 || cfg.RefreshAfter > cfg.MaxAge {
		cfg.RefreshAfter = min(5*time.Second, cfg.MaxAge)
	}
	if cfg.MaxProjects <= 0 {
		cfg.MaxProjects = 4096
	}
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = 50_000
	}
	if cfg.MaxKeptFiles <= 0 {
		cfg.MaxKeptFiles = 250_000
	}
	cfg.MaxKeptFiles = max(cfg.MaxKeptFiles, cfg.MaxFiles)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	bg, stop := context.WithCancel(context.Background())
	return &ListCache{Store: s, cfg: cfg, projects: map[string]*keptListing{}, order: lru.New(), bg: bg, stop: stop}
}

// Close stops the background listings and waits for them; the cache still
// answers, listing in the foreground.
func (c *ListCache) Close() {
	// Under mu: no ListRecent starts a listing between the stop and Wait.
	c.mu.Lock()
	c.stop()
	c.mu.Unlock()
	c.refreshing.Wait()
}

// WaitRefreshes waits for the background listings under way.
func (c *ListCache) WaitRefreshes() { c.refreshing.Wait() }

// refresh lists the project in the background and keeps the listing.
// A failure is not reported: the next ListRecent past RefreshAfter tries
// again, and past MaxAge one lists in the foreground and says why.
func (c *ListCache) refresh(projectID string) {
	defer c.refreshing.Done()
	ctx, cancel := context.WithTimeout(c.bg, refreshTimeout)
	defer cancel()
	_, _ = c.listWhole(ctx, projectID)
	c.mu.Lock()
	if k := c.projects[projectID]; k != nil {
		k.refreshing = false
	}
	c.mu.Unlock()
}

// List implements Store: always the store's listing; a whole project's is
// kept for ListRecent.
func (c *ListCache) List(ctx context.Context, projectID, dir string) ([]FileInfo, error) {
	clean, err := CleanDir(dir)
	if err != nil || clean != "" {
		return c.Store.List(ctx, projectID, dir)
	}
	files, err := c.listWhole(ctx, projectID)
	return files, err
}

// listWhole lists the whole project and keeps the listing unless a write
// through the cache overlapped it (the listing may predate the write).
func (c *ListCache) listWhole(ctx context.Context, projectID string) ([]FileInfo, error) {
	c.mu.Lock()
	k := c.keep(projectID)
	k.listings++
	gen := k.gen
	c.mu.Unlock()
	at := c.cfg.Now()
	files, err := c.Store.List(ctx, projectID, "")
	c.mu.Lock()
	defer c.mu.Unlock()
	k.listings--
	if err != nil {
		return nil, err
	}
	if len(files) > c.cfg.MaxFiles || k.gen != gen {
		return files, nil
	}
	// The caller owns what List returns: the kept listing is a copy.
	c.setFiles(k, slices.Clone(files), at)
	c.order.MoveToBack(k.elem) // kept now, so the newest
	c.evict(k)
	return files, nil
}

// setFiles replaces k's listing, keeping the count of files; the caller
// holds c.mu and places k in the order.
func (c *ListCache) setFiles(k *keptListing, files []FileInfo, at time.Time) {
	c.files += len(files) - len(k.files)
	k.files, k.at = files, at
}

// drop forgets k's listing (its entry stays, first to go); the caller
// holds c.mu.
func (c *ListCache) drop(k *keptListing) {
	c.setFiles(k, nil, time.Time{})
	c.order.MoveToFront(k.elem)
}

// ListRecent implements RecentLister from the project's kept listing when
// it is at most MaxAge old (past RefreshAfter, a background listing
// refreshes it), else from a new listing.
func (c *ListCache) ListRecent(ctx context.Context, projectID, dir string) ([]FileInfo, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("list %q in project %q: %w", dir, projectID, err)
	}
	clean, err := CleanDir(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("list %q in project %q: %w", dir, projectID, err)
	}
	c.mu.Lock()
	var files []FileInfo
	age := time.Duration(-1)
	if k := c.projects[projectID]; k != nil && !k.at.IsZero() {
		if a := c.cfg.Now().Sub(k.at); a <= c.cfg.MaxAge {
			files, age = k.files, max(a, 0)
			if a > c.cfg.RefreshAfter && !k.refreshing && c.bg.Err() == nil {
				k.refreshing = true
				c.refreshing.Add(1)
				go c.refresh(projectID)
			}
		}
	}
	c.mu.Unlock()
	if age < 0 {
		if files, err = c.listWhole(ctx, projectID); err != nil {
			return nil, 0, err
		}
		age = 0
	}
	return under(files, clean), age, nil
}

// under returns a copy of the files under the clean dir ("" for all).
func under(files []FileInfo, dir string) []FileInfo {
	if dir == "" {
		return slices.Clone(files)
	}
	prefix := dir + "/"
	lo, _ := slices.BinarySearchFunc(files, prefix, func(f FileInfo, p string) int { return strings.Compare(f.Path, p) })
	hi := lo
	for hi < len(files) && strings.HasPrefix(files[hi].Path, prefix) {
		hi++
	}
	return slices.Clone(files[lo:hi])
}

// keep returns the project's entry, making room for a new one (evict);
// the caller holds c.mu.
func (c *ListCache) keep(projectID string) *keptListing {
	if k := c.projects[projectID]; k != nil {
		return k
	}
	k := &keptListing{project: projectID}
	k.elem = c.order.PushFront(k)
	c.projects[projectID] = k
	c.evict(k)
	return k
}

// evict drops the oldest listings of projects none is listing now, other
// than keep's, until at most MaxProjects entries and MaxKeptFiles files
// are kept (with every entry being listed, the entries outnumber
// MaxProjects until listings end); the caller holds c.mu.
func (c *ListCache) evict(keep *keptListing) {
	e := c.order.Front()
	for e != nil && (len(c.projects) > c.cfg.MaxProjects || c.files > c.cfg.MaxKeptFiles) {
		k, next := e.Value.(*keptListing), e.Next()
		if k != keep && k.listings == 0 {
			c.files -= len(k.files)
			c.order.Remove(e)
			delete(c.projects, k.project)
		}
		e = next
	}
}

// wrote records a write through the cache: set puts info in the kept
// listing, remove takes path out of it, and neither drops the listing.
func (c *ListCache) wrote(projectID string, set *FileInfo, remove string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	// A project with no entry is being listed by no one (a listing keeps
	// its entry): there is nothing to update, and making an entry would
	// evict another project's listing.
	k := c.projects[projectID]
	if k == nil {
		return
	}
	k.gen = c.seq
	if k.at.IsZero() {
		return
	}
	switch {
	case set != nil && set.ETag != "" && set.Path != "":
		i, found := slices.BinarySearchFunc(k.files, set.Path, func(f FileInfo, p string) int { return strings.Compare(f.Path, p) })
		files := slices.Clone(k.files)
		if found {
			files[i] = *set
		} else {
			files = slices.Insert(files, i, *set)
		}
		if len(files) > c.cfg.MaxFiles {
			// As a listing past MaxFiles is not kept.
			c.drop(k)
			return
		}
		c.setFiles(k, files, k.at)
		c.evict(k)
	case set == nil && remove != "":
		c.setFiles(k, slices.DeleteFunc(slices.Clone(k.files), func(f FileInfo) bool { return f.Path == remove }), k.at)
	default:
		c.drop(k)
	}
}

// wroteFile records the outcome of a write of p.
func (c *ListCache) wroteFile(projectID string, info FileInfo, err error) {
	if err != nil {
		// Refused or failed, the file may have changed anyway (a conflict
		// says someone else changed it): list again.
		c.wrote(projectID, nil, "")
		return
	}
	c.wrote(projectID, &info, "")
}

// removedFile records the outcome of a delete of p.
func (c *ListCache) removedFile(projectID, p string, err error) {
	clean, cerr := CleanPath(p)
	if cerr != nil || err != nil && !errors.Is(err, ErrNotFound) {
		c.wrote(projectID, nil, "")
		return
	}
	c.wrote(projectID, nil, clean)
}

// Write implements Store.
func (c *ListCache) Write(ctx context.Context, projectID, p string, content []byte) (FileInfo, error) {
	info, err := c.Store.Write(ctx, projectID, p, content)
	c.wroteFile(projectID, info, err)
	return info, err
}

// Upsert implements Upserter with the store's Upsert (or a Stat and a
// write when it has none).
func (c *ListCache) Upsert(ctx context.Context, projectID, p string, content []byte) (FileInfo, bool, error) {
	info, created, err := Upsert(ctx, c.Store, projectID, p, content)
	c.wroteFile(projectID, info, err)
	return info, created, err
}

// WriteIf implements Store.
func (c *ListCache) WriteIf(ctx context.Context, projectID, p string, content []byte, ifMatch string) (FileInfo, error) {
	info, err := c.Store.WriteIf(ctx, projectID, p, content, ifMatch)
	c.wroteFile(projectID, info, err)
	return info, err
}

// Delete implements Store.
func (c *ListCache) Delete(ctx context.Context, projectID, p string) error {
	err := c.Store.Delete(ctx, projectID, p)
	c.removedFile(projectID, p, err)
	return err
}

// DeleteIf implements Store.
func (c *ListCache) DeleteIf(ctx context.Context, projectID, p, ifMatch string) error {
	err := c.Store.DeleteIf(ctx, projectID, p, ifMatch)
	c.removedFile(projectID, p, err)
	return err
}

// Move implements Store. The target's version is not known without a
// Stat: the kept listing is dropped.
func (c *ListCache) Move(ctx context.Context, projectID, from, to string, overwrite bool) error {
	err := c.Store.Move(ctx, projectID, from, to, overwrite)
	c.wrote(projectID, nil, "")
	return err
}
