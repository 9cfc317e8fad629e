package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentworker/agentworker/storage"
)

// Files is what a workspace is made from: the project as its task sees it
// (for a build, the store overlaid with the pending change set).
type Files interface {
	List(ctx context.Context, projectID, dir string) ([]storage.FileInfo, error)
	Read(ctx context.Context, projectID, path string) ([]byte, storage.FileInfo, error)
}

var (
	// ErrNoPackageJSON reports a project without a package.json at its root.
	ErrNoPackageJSON = errors.New("the project has no package.json at its root")
	// ErrClosed reports a workspace used after Close.
	ErrClosed = errors.New("workspace closed")
)

// ScriptError reports a script package.json does not define.
type ScriptError struct {
	Script string
	Have   []string // the scripts it defines, sorted
}

func (e *ScriptError) Error() string {
	if len(e.Have) == 0 {
		return fmt.Sprintf("package.json has no %q script (it defines no scripts)", e.Script)
	}
	return fmt.Sprintf("package.json has no %q script; it has: %s", e.Script, strings.Join(e.Have, ", "))
}

// Workspace is a project materialised in a directory for sandboxed
// commands. Each Run first syncs it with its Files: only files whose
// version changed (or that a command changed) are rewritten, and files
// gone from the project are removed. A command works on a copy of it in a
// tmpfs of MaxWorkspaceBytes inside its sandbox, which this process takes
// back when the command ends: what commands create beside the project's
// files (build output, caches) stays until Close. The sandbox never writes
// the directory itself.
type Workspace struct {
	sb        *Sandbox
	files     Files
	projectID string
	name      string

	mu     sync.Mutex // one sync or command at a time
	dir    string     // "" until the first sync
	root   *os.Root
	synced map[string]synced
	closed bool
}

// synced is what the last sync wrote at a path, to notice changes on both sides.
type synced struct {
	etag    string
	size    int64
	modTime time.Time
}

// Workspace returns the workspace of one task (name: its id) over files,
// the project as that task sees it. Nothing is written until its first Run;
// Close removes it.
func (s *Sandbox) Workspace(name string, files Files, projectID string) *Workspace {
	return &Workspace{sb: s, files: files, projectID: projectID, name: name, synced: map[string]synced{}}
}

// SyncStats says what a sync did.
type SyncStats struct {
	Files    int           `json:"files"`             // project files in the workspace
	Written  int           `json:"written"`           // files written by this sync
	Removed  int           `json:"removed"`           // files removed by this sync
	Skipped  []string      `json:"skipped,omitempty"` // project files left out: too large
	Duration time.Duration `json:"-"`
}

// Sync brings the workspace up to date with its files.
func (w *Workspace) Sync(ctx context.Context) (SyncStats, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sync(ctx)
}

func (w *Workspace) sync(ctx context.Context) (SyncStats, error) {
	start := time.Now()
	var st SyncStats
	if w.closed {
		return st, ErrClosed
	}
	if err := w.open(); err != nil {
		return st, err
	}
	list, err := w.files.List(ctx, w.projectID, "")
	if err != nil {
		return st, fmt.Errorf("sync workspace: list project %s: %w", w.projectID, err)
	}
	want := make(map[string]storage.FileInfo, len(list))
	var total int64
	for _, f := range list {
		switch {
		case !workspacePath(f.Path):
			continue
		case f.Size > w.sb.cfg.MaxFileBytes:
			st.Skipped = append(st.Skipped, f.Path)
			continue
		}
		want[f.Path] = f
		total += f.Size
	}
	if total > w.sb.cfg.MaxWorkspaceBytes {
		return st, fmt.Errorf("sync workspace: the project's files are %d bytes, over the %d-byte workspace cap", total, w.sb.cfg.MaxWorkspaceBytes)
	}
	for _, p := range slices.Sorted(maps.Keys(want)) {
		f := want[p]
		if prev, ok := w.synced[p]; ok && prev.etag == f.ETag && w.unchanged(p, prev) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return st, err
		}
		content, info, err := w.files.Read(ctx, w.projectID, p)
		if errors.Is(err, storage.ErrNotFound) {
			delete(want, p) // deleted since the listing
			continue
		}
		if err != nil {
			return st, fmt.Errorf("sync workspace: read %s: %w", p, err)
		}
		if err := w.write(p, content, info.ETag); err != nil {
			return st, err
		}
		st.Written++
	}
	for p := range w.synced {
		if _, ok := want[p]; ok {
			continue
		}
		if err := w.root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return st, fmt.Errorf("sync workspace: remove %s: %w", p, err)
		}
		delete(w.synced, p)
		st.Removed++
	}
	st.Files, st.Duration = len(w.synced), time.Since(start)
	return st, nil
}

// workspacePath reports whether a project file belongs in the workspace:
// not a secret (the sandbox must never see one), not under node_modules
// (the installed dependencies are mounted there).
func workspacePath(p string) bool {
	if storage.CheckSensitive(p) != nil {
		return false
	}
	return !slices.Contains(strings.Split(p, "/"), "node_modules")
}

// open creates the workspace's directory on first use.
func (w *Workspace) open() error {
	if w.root != nil {
		return nil
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	dir := filepath.Join(w.sb.runDir, safeName(w.name)+"-"+hex.EncodeToString(suffix))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("create workspace: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open workspace: %w", err)
	}
	w.dir, w.root = dir, root
	return nil
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func safeName(s string) string {
	s = unsafeChars.ReplaceAllString(s, "_")
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// unchanged reports whether the file at p is still what the last sync
// wrote there: a command may have changed, replaced or removed it.
func (w *Workspace) unchanged(p string, prev synced) bool {
	fi, err := w.root.Lstat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Size() == prev.size && fi.ModTime().Equal(prev.modTime)
}

// write puts content at p. Every step goes through the workspace's
// os.Root: a command that replaced a directory by a symlink cannot make
// this process write outside the workspace. The file is written aside and
// renamed into place, so a symlink at p is replaced, never followed.
func (w *Workspace) write(p string, content []byte, etag string) error {
	if err := w.mkdirs(path.Dir(p)); err != nil {
		return fmt.Errorf("sync workspace: %s: %w", p, err)
	}
	tmp := path.Join(path.Dir(p), ".aw-sync-"+path.Base(p))
	_ = w.root.Remove(tmp)
	f, err := w.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("sync workspace: write %s: %w", p, err)
	}
	_, werr := f.Write(content)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = w.root.Remove(tmp)
		return fmt.Errorf("sync workspace: write %s: %w", p, err)
	}
	if err := w.root.Rename(tmp, p); err != nil {
		// A command left a directory where the file goes.
		if rerr := w.root.RemoveAll(p); rerr != nil {
			return fmt.Errorf("sync workspace: replace %s: %w", p, errors.Join(err, rerr))
		}
		if err := w.root.Rename(tmp, p); err != nil {
			return fmt.Errorf("sync workspace: replace %s: %w", p, err)
		}
	}
	fi, err := w.root.Lstat(p)
	if err != nil {
		return fmt.Errorf("sync workspace: %s: %w", p, err)
	}
	w.synced[p] = synced{etag: etag, size: fi.Size(), modTime: fi.ModTime()}
	return nil
}

// mkdirs creates the directories of dir that are missing; whatever a
// command left in their place (a file, a symlink) is removed first.
func (w *Workspace) mkdirs(dir string) error {
	if dir == "." || dir == "" {
		return nil
	}
	cur := ""
	for _, seg := range strings.Split(dir, "/") {
		cur = path.Join(cur, seg)
		fi, err := w.root.Lstat(cur)
		if err == nil && fi.IsDir() {
			continue
		}
		if err == nil {
			if err := w.root.RemoveAll(cur); err != nil {
				return err
			}
		}
		if err := w.root.Mkdir(cur, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// readRegular reads a file the project's files put in the workspace. A
// command may have replaced it by a FIFO, a device or a symlink: only a
// regular file is read, opened without following a link and without
// blocking, so nothing a command leaves can hold this process.
func (w *Workspace) readRegular(name string) ([]byte, error) {
	f, err := w.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: a command left a %s there, not a regular file", name, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, w.sb.cfg.MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(b)) > w.sb.cfg.MaxFileBytes {
		return nil, fmt.Errorf("read %s: over %d bytes", name, w.sb.cfg.MaxFileBytes)
	}
	return b, nil
}

// Scripts returns the scripts of the project's package.json, as its files
// have it now.
func (w *Workspace) Scripts(ctx context.Context) (map[string]string, error) {
	content, _, err := w.files.Read(ctx, w.projectID, "package.json")
	if errors.Is(err, storage.ErrNotFound) {
		return nil, ErrNoPackageJSON
	}
	if err != nil {
		return nil, fmt.Errorf("read package.json: %w", err)
	}
	return parseScripts(content)
}

func parseScripts(content []byte) (map[string]string, error) {
	var pkg struct {
		Scripts map[string]string `json:"scripts"`
	}
	if err := json.Unmarshal(content, &pkg); err != nil {
		return nil, fmt.Errorf("package.json is not valid JSON: %w", err)
	}
	if pkg.Scripts == nil {
		pkg.Scripts = map[string]string{}
	}
	return pkg.Scripts, nil
}

// Close removes the workspace. A workspace is closed by the task that
// made it, when its attempt ends.
func (w *Workspace) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	return w.remove()
}

// remove deletes the workspace's directory; the next sync makes it anew.
func (w *Workspace) remove() error {
	if w.root == nil {
		return nil
	}
	w.root.Close()
	dir := w.dir
	w.root, w.dir, w.synced = nil, "", map[string]synced{}
	if err := removeAll(dir); err != nil {
		return fmt.Errorf("remove workspace: %w", err)
	}
	return nil
}

// replace makes next, what a command left in the workspace, the
// workspace's directory. The files the last sync wrote keep their times:
// the next sync rewrites only those the command changed.
func (w *Workspace) replace(next string) error {
	old := w.dir + ".old"
	if err := os.Rename(w.dir, old); err != nil {
		return fmt.Errorf("replace workspace: %w", err)
	}
	w.root.Close()
	var root *os.Root
	err := os.Rename(next, w.dir)
	if err == nil {
		root, err = os.OpenRoot(w.dir)
	}
	if err != nil {
		// The next sync makes the workspace anew.
		_ = removeAll(w.dir)
		w.root, w.dir, w.synced = nil, "", map[string]synced{}
		return errors.Join(fmt.Errorf("replace workspace: %w", err), removeAll(old))
	}
	w.root = root
	return removeAll(old)
}

// Dir is the workspace's directory on the host ("" before the first sync).
func (w *Workspace) Dir() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dir
}
