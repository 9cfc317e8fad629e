package sandbox

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// workspaceSource is where a command's sandbox sees the workspace's host
// directory, read-only; /work is a tmpfs of the workspace's cap holding a
// copy of it, so the kernel refuses every write past the cap whatever the
// names and permissions a command uses.
const workspaceSource = "/.workspace"

// fullBytes: a workspace tmpfs with less room than this left when the
// command ends was filled, and writes past it failed.
const fullBytes = 64 << 10

// supervisor is the shell that runs a command in a workspace tmpfs ("$@":
// prlimit and the command). It copies the workspace in, runs the command
// without the result descriptor, kills whatever the command left running,
// gives the command's user back every directory it made unreadable, and
// writes to the result descriptor the room left in /work and then /work
// as a tar (node_modules, the installed dependencies, left out).
func supervisor(resultFD int) string {
	return fmt.Sprintf(`cp -R --preserve=mode,timestamps %[2]s/. /work/ || { echo "the workspace could not be copied into the sandbox" >&2; exit 125; }
"$@" %[1]d>&-
rc=$?
kill -9 -1 2>/dev/null
chmod -R u+rwX /work 2>/dev/null
stat -f -c 'free %%a %%S' /work >&%[1]d
tar --format=posix -C /work --anchored --exclude=./node_modules -cf - . 2>/dev/null >&%[1]d
exit $rc
`, resultFD, workspaceSource)
}

// copyOut takes what a command left in its workspace, as its supervisor
// writes it, into a new host directory. The stream passed through the
// sandbox: a command could have written to it, so it is parsed as hostile
// input. Only directories, regular files and symbolic links are made,
// every step through an os.Root, with modes the worker can always remove
// (directories 0755, files 0644 or 0755); times are kept, so a sync still
// sees which files the command left unchanged.
type copyOut struct {
	dir        string // created by collect
	maxBytes   int64  // of file content
	maxEntries int

	full bool // the command filled the workspace
}

// collect reads the stream to its end.
func (c *copyOut) collect(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	line, err := br.ReadString('\n')
	if err != nil {
		return fmt.Errorf("the sandbox did not report its workspace: %w", err)
	}
	var avail, bsize int64
	f := strings.Fields(line)
	if len(f) == 3 && f[0] == "free" {
		avail, err = strconv.ParseInt(f[1], 10, 64)
		if err == nil {
			bsize, err = strconv.ParseInt(f[2], 10, 64)
		}
	}
	if len(f) != 3 || f[0] != "free" || err != nil {
		return fmt.Errorf("the sandbox reported its workspace as %.80q", line)
	}
	c.full = avail*bsize < fullBytes
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return fmt.Errorf("copy out the workspace: %w", err)
	}
	root, err := os.OpenRoot(c.dir)
	if err != nil {
		return fmt.Errorf("copy out the workspace: %w", err)
	}
	defer root.Close()
	return c.extract(root, tar.NewReader(br))
}

func (c *copyOut) extract(root *os.Root, tr *tar.Reader) error {
	var bytes int64
	for entries := 0; ; entries++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("copy out the workspace: %w", err)
		}
		if entries >= c.maxEntries {
			return fmt.Errorf("it made more than %d files in the workspace", c.maxEntries)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." || name == "node_modules" || strings.HasPrefix(name, "node_modules/") || !fs.ValidPath(name) {
			continue // the dependencies are mounted there
		}
		if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
			return fmt.Errorf("copy out %s: %w", name, err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = root.Mkdir(name, 0o755)
			if errors.Is(err, fs.ErrExist) {
				err = nil
			}
		case tar.TypeReg:
			bytes += h.Size
			if bytes > c.maxBytes {
				return fmt.Errorf("it left more than %d MiB in the workspace", c.maxBytes>>20)
			}
			err = c.file(root, name, h, tr)
		case tar.TypeSymlink:
			err = root.Symlink(h.Linkname, name)
		case tar.TypeLink:
			err = root.Link(path.Clean(strings.TrimPrefix(h.Linkname, "./")), name)
		default:
			continue // FIFOs, devices: nothing a build's output needs
		}
		if err != nil {
			return fmt.Errorf("copy out %s: %w", name, err)
		}
	}
}

func (c *copyOut) file(root *os.Root, name string, h *tar.Header, r io.Reader) error {
	mode := os.FileMode(0o644)
	if h.Mode&0o111 != 0 {
		mode = 0o755
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	_, werr := io.CopyN(f, r, h.Size)
	if err := errors.Join(werr, f.Close()); err != nil {
		return err
	}
	return root.Chtimes(name, h.ModTime, h.ModTime)
}

// removeAll removes dir whatever its owner did to the modes of what it
// holds: where a directory cannot be read or written, every directory is
// given back to the owner (0700) and the removal tried again.
func removeAll(dir string) error {
	err := os.RemoveAll(dir)
	if err == nil {
		return nil
	}
	fd, oerr := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if oerr != nil {
		if cerr := unix.Chmod(dir, 0o700); cerr != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
		if fd, oerr = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); oerr != nil {
			return fmt.Errorf("remove %s: %w", dir, errors.Join(err, oerr))
		}
	}
	rerr := restoreModes(fd)
	unix.Close(fd)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, errors.Join(err, rerr))
	}
	return nil
}

// restoreModes makes the directory fd and every directory under it 0700,
// going down by descriptors: no path grows past the host's limit.
func restoreModes(fd int) error {
	if err := unix.Fchmod(fd, 0o700); err != nil {
		return err
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dup), "dir")
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if err := unix.Fchmodat(fd, e.Name(), 0o700, 0); err != nil {
			errs = append(errs, err)
			continue
		}
		child, err := unix.Openat(fd, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, restoreModes(child))
		unix.Close(child)
	}
	return errors.Join(errs...)
}
