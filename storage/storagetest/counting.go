package storagetest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/agentworker/agentworker/storage"
)

// Counting is a Store that counts the requests made of it, by method (a
// listing of a whole project as "List", of a directory as "List dir").
type Counting struct {
	storage.Store
	mu     sync.Mutex
	counts map[string]int
}

// NewCounting counts s's requests.
func NewCounting(s storage.Store) *Counting { return &Counting{Store: s, counts: map[string]int{}} }

func (c *Counting) count(op string) {
	c.mu.Lock()
	c.counts[op]++
	c.mu.Unlock()
}

// Take returns the requests counted since the last Take, as "List 1, Stat
// 1, …" in the methods' order of name ("" for none), and starts again.
func (c *Counting) Take() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for _, op := range slices.Sorted(maps.Keys(c.counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", op, c.counts[op]))
	}
	clear(c.counts)
	return strings.Join(parts, ", ")
}

// Read implements storage.Store.
func (c *Counting) Read(ctx context.Context, projectID, p string) ([]byte, storage.FileInfo, error) {
	c.count("Read")
	return c.Store.Read(ctx, projectID, p)
}

// Write implements storage.Store.
func (c *Counting) Write(ctx context.Context, projectID, p string, content []byte) (storage.FileInfo, error) {
	c.count("Write")
	return c.Store.Write(ctx, projectID, p, content)
}

// WriteIf implements storage.Store.
func (c *Counting) WriteIf(ctx context.Context, projectID, p string, content []byte, ifMatch string) (storage.FileInfo, error) {
	c.count("WriteIf")
	return c.Store.WriteIf(ctx, projectID, p, content, ifMatch)
}

// Delete implements storage.Store.
func (c *Counting) Delete(ctx context.Context, projectID, p string) error {
	c.count("Delete")
	return c.Store.Delete(ctx, projectID, p)
}

// DeleteIf implements storage.Store.
func (c *Counting) DeleteIf(ctx context.Context, projectID, p, ifMatch string) error {
	c.count("DeleteIf")
	return c.Store.DeleteIf(ctx, projectID, p, ifMatch)
}

// Stat implements storage.Store.
func (c *Counting) Stat(ctx context.Context, projectID, p string) (storage.FileInfo, error) {
	c.count("Stat")
	return c.Store.Stat(ctx, projectID, p)
}

// List implements storage.Store.
func (c *Counting) List(ctx context.Context, projectID, dir string) ([]storage.FileInfo, error) {
	if dir == "" {
		c.count("List")
	} else {
		c.count("List dir")
	}
	return c.Store.List(ctx, projectID, dir)
}

// Move implements storage.Store.
func (c *Counting) Move(ctx context.Context, projectID, from, to string, overwrite bool) error {
	c.count("Move")
	return c.Store.Move(ctx, projectID, from, to, overwrite)
}
