package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"
)

// quota bounds what an install writes on the host's disk: the
// directories bound writable into its sandbox (a command's workspace, /tmp
// and /dev/shm are tmpfs of a fixed size), measured while it runs. A
// process over it is killed within quotaInterval. An install runs no code
// of the project: npm makes what it writes.
type quota struct {
	what     string // "the workspace", "the install"
	dirs     []string
	maxBytes int64
}

// quotaInterval is how often a running process's disk use is measured;
// maxQuotaEntries caps the files and directories it may make, which also
// bounds the time one measure takes.
const (
	quotaInterval   = 250 * time.Millisecond
	maxQuotaEntries = 200_000
)

// errOverQuota stops a measure early.
var errOverQuota = errors.New("over quota")

// over measures the quota's directories (allocated blocks; links are not
// followed) and says how they exceed it, or "".
func (q *quota) over() string {
	var bytes int64
	entries := 0
	for _, dir := range q.dirs {
		err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // removed meanwhile
			}
			entries++
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					bytes += st.Blocks * 512
				}
			}
			if bytes > q.maxBytes || entries > maxQuotaEntries {
				return errOverQuota
			}
			return nil
		})
		if errors.Is(err, errOverQuota) {
			break
		}
	}
	switch {
	case bytes > q.maxBytes:
		return fmt.Sprintf("it wrote more than %d MiB in %s", q.maxBytes>>20, q.what)
	case entries > maxQuotaEntries:
		return fmt.Sprintf("it made more than %d files in %s", maxQuotaEntries, q.what)
	}
	return ""
}

// watch measures the quota every quotaInterval until done is closed, and
// calls exceeded once when it is over. The returned channel is closed
// when watching has stopped.
func (q *quota) watch(done <-chan struct{}, exceeded func(why string)) <-chan struct{} {
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(quotaInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if why := q.over(); why != "" {
					exceeded(why)
					return
				}
			}
		}
	}()
	return stopped
}
