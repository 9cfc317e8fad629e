package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentworker/agentworker/storage"
)

// guarded is the project store as every tool sees it: the file policy of
// storage (policy.go) applied after the path jail. Sensitive files can be
// neither read nor written (and are left out of listings, so searches skip
// them); writes, deletes and moves stay within the task's allowed_paths;
// reads and writes have size caps.
//
// It also notes an outage of the store (storage.ErrUnavailable) that a
// call met, even one the tool swallowed (a search skipping a file it could
// not read): the call's result is then that error, not what the tool made
// of a partial view.
type guarded struct {
	storage.Store
	scope             *storage.Scope
	reserved          []string
	maxRead, maxWrite int64
}

// ErrReservedPath refuses a change to a path the service writes itself.
var ErrReservedPath = errors.New("the service writes this file itself; read it, but do not change it")

// ReservedPathError refuses a path that is, is under, or is a directory of
// a file the service writes itself: a file at tasks.md/evil (or at docs,
// for docs/tasks.md) would leave the service no place for its own.
type ReservedPathError struct {
	Path     string // the path refused
	Reserved string // the file the service writes
}

func (e *ReservedPathError) Error() string {
	if e.Path == e.Reserved {
		return fmt.Sprintf("%s: %v", e.Path, ErrReservedPath)
	}
	return fmt.Sprintf("%s: the service writes %s itself, and a file at %s would take its place", e.Path, e.Reserved, e.Path)
}

func (e *ReservedPathError) Unwrap() error { return ErrReservedPath }

// reservedBy returns the reserved file that clean is, is under, or is a
// directory of.
func reservedBy(reserved []string, clean string) (string, bool) {
	for _, r := range reserved {
		if clean == r || strings.HasPrefix(clean, r+"/") || strings.HasPrefix(r, clean+"/") {
			return r, true
		}
	}
	return "", false
}

// outage holds the first outage a tool call met.
type outage struct {
	mu    sync.Mutex
	first error
}

func (o *outage) note(err error) {
	if o == nil || !errors.Is(err, storage.ErrUnavailable) {
		return
	}
	o.mu.Lock()
	if o.first == nil {
		o.first = err
	}
	o.mu.Unlock()
}

func (o *outage) err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.first
}

// noting is a store that notes every outage its calls meet.
type noting struct {
	storage.Store
	outage *outage
}

func (n noting) Read(ctx context.Context, projectID, p string) ([]byte, storage.FileInfo, error) {
	c, info, err := n.Store.Read(ctx, projectID, p)
	n.outage.note(err)
	return c, info, err
}

func (n noting) Stat(ctx context.Context, projectID, p string) (storage.FileInfo, error) {
	info, err := n.Store.Stat(ctx, projectID, p)
	n.outage.note(err)
	return info, err
}

func (n noting) List(ctx context.Context, projectID, dir string) ([]storage.FileInfo, error) {
	files, err := n.Store.List(ctx, projectID, dir)
	n.outage.note(err)
	return files, err
}

func (n noting) ListRecent(ctx context.Context, projectID, dir string) ([]storage.FileInfo, time.Duration, error) {
	files, age, err := storage.ListRecent(ctx, n.Store, projectID, dir)
	n.outage.note(err)
	return files, age, err
}

func (n noting) Write(ctx context.Context, projectID, p string, content []byte) (storage.FileInfo, error) {
	info, err := n.Store.Write(ctx, projectID, p, content)
	n.outage.note(err)
	return info, err
}

func (n noting) Upsert(ctx context.Context, projectID, p string, content []byte) (storage.FileInfo, bool, error) {
	info, created, err := storage.Upsert(ctx, n.Store, projectID, p, content)
	n.outage.note(err)
	return info, created, err
}

func (n noting) WriteIf(ctx context.Context, projectID, p string, content []byte, ifMatch string) (storage.FileInfo, error) {
	info, err := n.Store.WriteIf(ctx, projectID, p, content, ifMatch)
	n.outage.note(err)
	return info, err
}

func (n noting) Delete(ctx context.Context, projectID, p string) error {
	err := n.Store.Delete(ctx, projectID, p)
	n.outage.note(err)
	return err
}

func (n noting) DeleteIf(ctx context.Context, projectID, p, ifMatch string) error {
	err := n.Store.DeleteIf(ctx, projectID, p, ifMatch)
	n.outage.note(err)
	return err
}

func (n noting) Move(ctx context.Context, projectID, from, to string, overwrite bool) error {
	err := n.Store.Move(ctx, projectID, from, to, overwrite)
	n.outage.note(err)
	return err
}

func guard(env Env, out *outage) storage.Store {
	g := guarded{Store: noting{Store: env.Store, outage: out}, scope: env.Scope, reserved: env.Reserved, maxRead: env.MaxReadBytes, maxWrite: env.MaxWriteBytes}
	if g.maxRead <= 0 {
		g.maxRead = storage.DefaultMaxReadBytes
	}
	if g.maxWrite <= 0 {
		g.maxWrite = storage.DefaultMaxWriteBytes
	}
	return g
}

// readable checks a path before it is read.
func (g guarded) readable(p string) (string, error) {
	clean, err := storage.CleanPath(p)
	if err != nil {
		return "", err
	}
	return clean, storage.CheckSensitive(clean)
}

// writable checks a path before it is changed.
func (g guarded) writable(p string) (string, error) {
	clean, err := g.readable(p)
	if err != nil {
		return "", err
	}
	if r, ok := reservedBy(g.reserved, clean); ok {
		return "", &ReservedPathError{Path: clean, Reserved: r}
	}
	return clean, g.scope.Check(clean)
}

func (g guarded) Read(ctx context.Context, projectID, p string) ([]byte, storage.FileInfo, error) {
	clean, err := g.readable(p)
	if err != nil {
		return nil, storage.FileInfo{}, err
	}
	// One request: the store refuses a file over the cap from its size,
	// before the content (storage.WithReadLimit); the check after the read
	// holds for a store that does not.
	content, info, err := g.Store.Read(storage.WithReadLimit(ctx, g.maxRead), projectID, clean)
	if err != nil {
		return nil, info, err
	}
	if err := storage.CheckSize(clean, int64(len(content)), g.maxRead); err != nil {
		return nil, storage.FileInfo{}, err
	}
	return content, info, nil
}

func (g guarded) Stat(ctx context.Context, projectID, p string) (storage.FileInfo, error) {
	clean, err := g.readable(p)
	if err != nil {
		return storage.FileInfo{}, err
	}
	return g.Store.Stat(ctx, projectID, clean)
}

func (g guarded) List(ctx context.Context, projectID, dir string) ([]storage.FileInfo, error) {
	files, err := g.Store.List(ctx, projectID, dir)
	if err != nil {
		return nil, err
	}
	return notSensitive(files), nil
}

// ListRecent implements storage.RecentLister over the store's.
func (g guarded) ListRecent(ctx context.Context, projectID, dir string) ([]storage.FileInfo, time.Duration, error) {
	files, age, err := storage.ListRecent(ctx, g.Store, projectID, dir)
	if err != nil {
		return nil, 0, err
	}
	return notSensitive(files), age, nil
}

func notSensitive(files []storage.FileInfo) []storage.FileInfo {
	out := files[:0:0]
	for _, f := range files {
		if storage.CheckSensitive(f.Path) == nil {
			out = append(out, f)
		}
	}
	return out
}

// writableContent checks a path and the content to be written there.
func (g guarded) writableContent(p string, content []byte) (string, error) {
	clean, err := g.writable(p)
	if err != nil {
		return "", err
	}
	return clean, storage.CheckSize(clean, int64(len(content)), g.maxWrite)
}

func (g guarded) Write(ctx context.Context, projectID, p string, content []byte) (storage.FileInfo, error) {
	clean, err := g.writableContent(p, content)
	if err != nil {
		return storage.FileInfo{}, err
	}
	return g.Store.Write(ctx, projectID, clean, content)
}

// Upsert implements storage.Upserter with the checks of Write.
func (g guarded) Upsert(ctx context.Context, projectID, p string, content []byte) (storage.FileInfo, bool, error) {
	clean, err := g.writableContent(p, content)
	if err != nil {
		return storage.FileInfo{}, false, err
	}
	return storage.Upsert(ctx, g.Store, projectID, clean, content)
}

func (g guarded) WriteIf(ctx context.Context, projectID, p string, content []byte, ifMatch string) (storage.FileInfo, error) {
	clean, err := g.writableContent(p, content)
	if err != nil {
		return storage.FileInfo{}, err
	}
	return g.Store.WriteIf(ctx, projectID, clean, content, ifMatch)
}

func (g guarded) Delete(ctx context.Context, projectID, p string) error {
	clean, err := g.writable(p)
	if err != nil {
		return err
	}
	return g.Store.Delete(ctx, projectID, clean)
}

func (g guarded) DeleteIf(ctx context.Context, projectID, p, ifMatch string) error {
	clean, err := g.writable(p)
	if err != nil {
		return err
	}
	return g.Store.DeleteIf(ctx, projectID, clean, ifMatch)
}

func (g guarded) Move(ctx context.Context, projectID, from, to string, overwrite bool) error {
	cfrom, err := g.writable(from)
	if err != nil {
		return err
	}
	cto, err := g.writable(to)
	if err != nil {
		return err
	}
	if info, err := g.Store.Stat(ctx, projectID, cfrom); err == nil {
		if err := storage.CheckSize(cto, info.Size, g.maxWrite); err != nil {
			return fmt.Errorf("move %s: %w", cfrom, err)
		}
	}
	return g.Store.Move(ctx, projectID, cfrom, cto, overwrite)
}
