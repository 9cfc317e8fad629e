package storage

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// stagingDir is the directory under the local root where writes are staged
// before being renamed into place. Project ids never start with a dot, so it
// cannot collide with a project.
const stagingDir = ".staging"

// errNotDir reports a path whose parent component is a file.
var errNotDir = errors.New("parent is not a directory")

// Local stores project files in a directory on the local file system, at
// "<root>/<project_id>/<path>".
//
// Every operation goes through an [os.Root], so no path or symlink can reach
// outside the root; on top of that, symlinks inside a project are refused
// (ErrInvalidPath) rather than followed, and List skips them. Writes are
// atomic: the content is written and synced to a file in "<root>/.staging"
// and renamed into place, so readers see the old or the new content, never a
// part. The ETag is the hex SHA-256 of the content.
//
// Writes, deletes and moves of a path hold a lock of that path, so WriteIf's
// check and write are atomic among the users of one Local value. The locks
// are in memory: two processes (or two Local values) sharing a directory
// can still race between WriteIf's check and its write. Several replicas
// must share an S3 store instead.
type Local struct {
	root  string
	locks [64]sync.Mutex // by hash of "<project_id>/<path>"
}

var _ Store = (*Local)(nil)

// NewLocal returns a store rooted at the directory root, creating it if
// needed.
func NewLocal(root string) (*Local, error) {
	if root == "" {
		return nil, fmt.Errorf("new local store: root directory is required: %w", ErrInvalidPath)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("new local store at %q: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("new local store at %q: %w", root, err)
	}
	l := &Local{root: abs}
	if err := l.Ping(context.Background()); err != nil {
		return nil, fmt.Errorf("new local store: %w", err)
	}
	return l, nil
}

// Ping reports whether the root directory is still there.
func (l *Local) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ping local store at %q: %w", l.root, err)
	}
	fi, err := os.Stat(l.root)
	if err != nil {
		return fmt.Errorf("ping local store: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("ping local store: %q is not a directory", l.root)
	}
	return nil
}

// Read implements Store.
func (l *Local) Read(ctx context.Context, projectID, p string) ([]byte, FileInfo, error) {
	r, clean, err := l.open(ctx, projectID, p)
	if err != nil {
		return nil, FileInfo{}, fmt.Errorf("read %q in project %q: %w", p, projectID, err)
	}
	defer r.Close()
	var content []byte
	info, err := readFile(r, projectID, clean, func(f *os.File, h io.Writer) error {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if err := checkReadLimit(ctx, clean, fi.Size()); err != nil {
			return err
		}
		content, err = io.ReadAll(io.TeeReader(f, h))
		return err
	})
	var tooLarge *TooLargeError
	if errors.As(err, &tooLarge) {
		return nil, FileInfo{}, tooLarge
	}
	if err != nil {
		return nil, FileInfo{}, fmt.Errorf("read %q in project %q: %w", p, projectID, err)
	}
	return content, info, nil
}

// Stat implements Store.
func (l *Local) Stat(ctx context.Context, projectID, p string) (FileInfo, error) {
	r, clean, err := l.open(ctx, projectID, p)
	if err != nil {
		return FileInfo{}, fmt.Errorf("stat %q in project %q: %w", p, projectID, err)
	}
	defer r.Close()
	info, err := readFile(r, projectID, clean, hashOnly)
	if err != nil {
		return FileInfo{}, fmt.Errorf("stat %q in project %q: %w", p, projectID, err)
	}
	return info, nil
}

// lock locks the given paths of a project, in a fixed order, and returns
// the unlock.
func (l *Local) lock(projectID string, paths ...string) func() {
	var idx []int
	for _, p := range paths {
		h := fnv.New32a()
		_, _ = io.WriteString(h, projectID+"/"+p)
		idx = append(idx, int(h.Sum32()%uint32(len(l.locks))))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		l.locks[i].Lock()
	}
	return func() {
		for _, i := range idx {
			l.locks[i].Unlock()
		}
	}
}

// Write implements Store.
func (l *Local) Write(ctx context.Context, projectID, p string, content []byte) (FileInfo, error) {
	r, clean, err := l.open(ctx, projectID, p)
	if err != nil {
		return FileInfo{}, fmt.Errorf("write %q in project %q: %w", p, projectID, err)
	}
	defer r.Close()
	defer l.lock(projectID, clean)()
	info, err := l.write(r, projectID, clean, content)
	if err != nil {
		return FileInfo{}, fmt.Errorf("write %q in project %q: %w", p, projectID, err)
	}
	return info, nil
}

// WriteIf implements Store: the current content's hash is compared with
// ifMatch under the path's lock (see Local for the limits of that lock).
func (l *Local) WriteIf(ctx context.Context, projectID, p string, content []byte, ifMatch string) (FileInfo, error) {
	r, clean, err := l.open(ctx, projectID, p)
	if err != nil {
		return FileInfo{}, fmt.Errorf("write %q in project %q if at version %q: %w", p, projectID, ifMatch, err)
	}
	defer r.Close()
	defer l.lock(projectID, clean)()
	var current []byte
	read := func() ([]byte, FileInfo, error) {
		info, err := readFile(r, projectID, clean, func(f *os.File, h io.Writer) error {
			var err error
			current, err = io.ReadAll(io.TeeReader(f, h))
			return err
		})
		return current, info, err
	}
	cur, err := readFile(r, projectID, clean, hashOnly)
	switch {
	case errors.Is(err, ErrNotFound):
		if ifMatch != "" {
			err = &ConflictError{Path: clean}
		} else {
			err = nil
		}
	case err != nil:
	case cur.ETag != ifMatch:
		err = conflict(clean, read)
	}
	if err != nil {
		return FileInfo{}, fmt.Errorf("write %q in project %q if at version %q: %w", p, projectID, ifMatch, err)
	}
	info, err := l.write(r, projectID, clean, content)
	if err != nil {
		return FileInfo{}, fmt.Errorf("write %q in project %q: %w", p, projectID, err)
	}
	return info, nil
}

func (l *Local) write(r *os.Root, projectID, clean string, content []byte) (FileInfo, error) {
	name := projectID + "/" + clean
	if err := checkTarget(r, name); err != nil {
		return FileInfo{}, err
	}
	tmp, staged, err := stage(r, content)
	if err != nil {
		return FileInfo{}, err
	}
	if err := renameInto(r, tmp, name); err != nil {
		_ = r.Remove(tmp)
		return FileInfo{}, err
	}
	sum := sha256.Sum256(content)
	return FileInfo{Path: clean, Size: int64(len(content)), ETag: hex.EncodeToString(sum[:]), ModTime: staged.ModTime()}, nil
}

// Delete implements Store. Directories left empty are removed, up to but
// not including the project directory.
func (l *Local) Delete(ctx context.Context, projectID, p string) error {
	r, clean, err := l.open(ctx, projectID, p)
	if err != nil {
		return fmt.Errorf("delete %q in project %q: %w", p, projectID, err)
	}
	defer r.Close()
	defer l.lock(projectID, clean)()
	name := projectID + "/" + clean
	if _, err := regularFile(r, name); err != nil {
		return fmt.Errorf("delete %q in project %q: %w", p, projectID, err)
	}
	if err := r.Remove(name); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = ErrNotFound
		}
		return fmt.Errorf("delete %q in project %q: %w", p, projectID, err)
	}
	pruneParents(r, projectID, clean)
	return nil
}

// DeleteIf implements Store: the current content's hash is compared with
// ifMatch and the file removed under the path's lock.
func (l *Local) DeleteIf(ctx context.Context, projectID, p, ifMatch string) error {
	r, clean, err := l.open(ctx, projectID, p)
	if err == nil && ifMatch == "" {
		err = errNoVersion
	}
	if err != nil {
		return fmt.Errorf("delete %q in project %q if at version %q: %w", p, projectID, ifMatch, err)
	}
	defer r.Close()
	defer l.lock(projectID, clean)()
	cur, err := readFile(r, projectID, clean, hashOnly)
	switch {
	case errors.Is(err, ErrNotFound):
		err = &ConflictError{Path: clean}
	case err != nil:
	case cur.ETag != ifMatch:
		err = conflict(clean, func() ([]byte, FileInfo, error) {
			var current []byte
			info, err := readFile(r, projectID, clean, func(f *os.File, h io.Writer) error {
				var err error
				current, err = io.ReadAll(io.TeeReader(f, h))
				return err
			})
			return current, info, err
		})
	default:
		name := projectID + "/" + clean
		if err = r.Remove(name); err == nil {
			pruneParents(r, projectID, clean)
		}
	}
	if err != nil {
		return fmt.Errorf("delete %q in project %q if at version %q: %w", p, projectID, ifMatch, err)
	}
	return nil
}

// List implements Store. Only regular files are listed; symlinks and other
// special files are skipped. A dir that does not exist lists as empty. Each
// file is read to compute its ETag.
func (l *Local) List(ctx context.Context, projectID, dir string) ([]FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list %q in project %q: %w", dir, projectID, err)
	}
	if err := checkProjectID(projectID); err != nil {
		return nil, fmt.Errorf("list %q in project %q: %w", dir, projectID, err)
	}
	clean, err := CleanDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list %q in project %q: %w", dir, projectID, err)
	}
	r, err := os.OpenRoot(l.root)
	if err != nil {
		return nil, fmt.Errorf("list %q in project %q: %w", dir, projectID, err)
	}
	defer r.Close()
	files, err := list(ctx, r, projectID, clean)
	if err != nil {
		return nil, fmt.Errorf("list %q in project %q: %w", dir, projectID, err)
	}
	return files, nil
}

func list(ctx context.Context, r *os.Root, projectID, dir string) ([]FileInfo, error) {
	base := projectID
	if dir != "" {
		base += "/" + dir
	}
	fi, err := lstatChain(r, base)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, errNotDir):
		return []FileInfo{}, nil
	case err != nil:
		return nil, err
	case !fi.IsDir():
		return []FileInfo{}, nil
	}
	files := []FileInfo{}
	err = fs.WalkDir(r.FS(), base, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel := strings.TrimPrefix(name, projectID+"/")
		info, err := readFile(r, projectID, rel, hashOnly)
		if errors.Is(err, ErrNotFound) {
			return nil // removed while walking
		}
		if err != nil {
			return err
		}
		files = append(files, info)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(files, func(a, b FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// Move implements Store with a rename. The existence check and the rename
// are two steps, so two concurrent moves onto the same target may both
// succeed, the later one winning, as with S3.
func (l *Local) Move(ctx context.Context, projectID, from, to string, overwrite bool) error {
	r, cleanFrom, err := l.open(ctx, projectID, from)
	if err != nil {
		return fmt.Errorf("move %q to %q in project %q: %w", from, to, projectID, err)
	}
	defer r.Close()
	cleanTo, err := CleanPath(to)
	if err != nil {
		return fmt.Errorf("move %q to %q in project %q: %w", from, to, projectID, err)
	}
	defer l.lock(projectID, cleanFrom, cleanTo)()
	if err := move(r, projectID, cleanFrom, cleanTo, overwrite); err != nil {
		return fmt.Errorf("move %q to %q in project %q: %w", from, to, projectID, err)
	}
	return nil
}

func move(r *os.Root, projectID, from, to string, overwrite bool) error {
	fromName, toName := projectID+"/"+from, projectID+"/"+to
	if _, err := regularFile(r, fromName); err != nil {
		return err
	}
	if from == to {
		if overwrite {
			return nil
		}
		return ErrExists
	}
	fi, err := lstatChain(r, toName)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("target is a directory: %w", ErrInvalidPath)
	case err == nil && !overwrite:
		return ErrExists
	}
	if err := checkTarget(r, toName); err != nil {
		return err
	}
	if err := renameInto(r, fromName, toName); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := regularFile(r, fromName); errors.Is(serr, ErrNotFound) {
				return ErrNotFound // moved or deleted meanwhile
			}
		}
		return err
	}
	pruneParents(r, projectID, from)
	return nil
}

// open checks the context and the inputs and opens the store root.
func (l *Local) open(ctx context.Context, projectID, p string) (*os.Root, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	if err := checkProjectID(projectID); err != nil {
		return nil, "", err
	}
	clean, err := CleanPath(p)
	if err != nil {
		return nil, "", err
	}
	r, err := os.OpenRoot(l.root)
	if err != nil {
		return nil, "", err
	}
	return r, clean, nil
}

// lstatChain stats name under r one component at a time without following
// symlinks. It returns an error wrapping fs.ErrNotExist when a component is
// missing, errNotDir when a parent component is not a directory, and
// ErrInvalidPath when a component is a symlink.
func lstatChain(r *os.Root, name string) (fs.FileInfo, error) {
	var fi fs.FileInfo
	var parent string
	for i := 0; ; {
		j := strings.IndexByte(name[i:], '/')
		prefix := name
		if j >= 0 {
			prefix = name[:i+j]
		}
		if fi != nil && !fi.IsDir() {
			return nil, fmt.Errorf("%q: %w", parent, errNotDir)
		}
		var err error
		fi, err = r.Lstat(prefix)
		parent = prefix
		if err != nil {
			return nil, err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("%q is a symlink: %w", prefix, ErrInvalidPath)
		}
		if j < 0 {
			return fi, nil
		}
		i += j + 1
	}
}

// regularFile returns the info of the regular file name, ErrNotFound when
// there is none, or ErrInvalidPath when the path holds a symlink or a
// special file.
func regularFile(r *os.Root, name string) (fs.FileInfo, error) {
	fi, err := lstatChain(r, name)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, errNotDir):
		return nil, ErrNotFound
	case err != nil:
		return nil, err
	case fi.IsDir():
		return nil, fmt.Errorf("is a directory: %w", ErrNotFound)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("not a regular file: %w", ErrInvalidPath)
	}
	return fi, nil
}

// checkTarget makes sure name can be written: its existing parents are
// directories and not symlinks, and it is not itself a directory or symlink.
func checkTarget(r *os.Root, name string) error {
	fi, err := lstatChain(r, name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case errors.Is(err, errNotDir):
		return fmt.Errorf("%w: %w", err, ErrInvalidPath)
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("is a directory: %w", ErrInvalidPath)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("not a regular file: %w", ErrInvalidPath)
	}
	return nil
}

// hashOnly feeds the file to the hash and keeps nothing.
func hashOnly(f *os.File, h io.Writer) error {
	_, err := io.Copy(h, f)
	return err
}

// readFile opens the regular file "<projectID>/<rel>", passes it to consume
// together with the hash that becomes the ETag, and returns its info.
func readFile(r *os.Root, projectID, rel string, consume func(*os.File, io.Writer) error) (FileInfo, error) {
	name := projectID + "/" + rel
	if _, err := regularFile(r, name); err != nil {
		return FileInfo{}, err
	}
	f, err := r.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return FileInfo{}, ErrNotFound
		}
		return FileInfo{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return FileInfo{}, err
	}
	if !fi.Mode().IsRegular() {
		return FileInfo{}, fmt.Errorf("not a regular file: %w", ErrInvalidPath)
	}
	h := sha256.New()
	if err := consume(f, h); err != nil {
		return FileInfo{}, err
	}
	return FileInfo{Path: rel, Size: fi.Size(), ETag: hex.EncodeToString(h.Sum(nil)), ModTime: fi.ModTime()}, nil
}

// stage writes content to a new synced file in the staging directory and
// returns its name under r and its modification time.
func stage(r *os.Root, content []byte) (string, fs.FileInfo, error) {
	if err := r.MkdirAll(stagingDir, 0o700); err != nil {
		return "", nil, err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	name := stagingDir + "/" + hex.EncodeToString(b[:])
	f, err := r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", nil, err
	}
	_, err = f.Write(content)
	if err == nil {
		err = f.Sync()
	}
	var fi fs.FileInfo
	if err == nil {
		fi, err = f.Stat()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = r.Remove(name)
		return "", nil, err
	}
	return name, fi, nil
}

// renameInto renames from to to, creating to's parent directories. A
// concurrent Delete may prune a parent between the two steps, so the pair is
// retried a few times.
func renameInto(r *os.Root, from, to string) error {
	var err error
	for range 3 {
		if err = r.MkdirAll(path.Dir(to), 0o755); err != nil {
			return err
		}
		if err = r.Rename(from, to); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if _, serr := r.Lstat(from); serr != nil {
			return err // the source is gone, not the target's parent
		}
	}
	return err
}

// pruneParents removes the empty directories above rel, up to but not
// including the project directory. It is best effort: a directory that is
// not empty, or any other failure, stops it.
func pruneParents(r *os.Root, projectID, rel string) {
	for dir := path.Dir(rel); dir != "."; dir = path.Dir(dir) {
		if err := r.Remove(projectID + "/" + dir); err != nil {
			return
		}
	}
}
