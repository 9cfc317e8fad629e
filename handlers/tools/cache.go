package tools

import "sync"

// Cache keeps file contents keyed by project, path and version (the ETag a
// listing reports), up to a byte budget. A file whose version changed is
// simply not found, so the cache never serves stale content, and one cache
// can serve every task of a process: a chat, a plan and a build on one
// project read its files once. The zero of *Cache (nil) caches nothing. It
// is safe for concurrent use.
type Cache struct {
	maxBytes int

	mu    sync.Mutex
	bytes int
	files map[string]cached
}

type cached struct {
	version string
	content []byte
}

// NewCache returns a cache holding up to maxBytes of content.
func NewCache(maxBytes int) *Cache {
	return &Cache{maxBytes: maxBytes, files: map[string]cached{}}
}

func (c *Cache) get(path, version string) ([]byte, bool) {
	if c == nil || version == "" {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.files[path]
	if !ok || f.version != version {
		return nil, false
	}
	return f.content, true
}

// put stores content, replacing the path's older version. To make room it
// evicts arbitrary entries (map order); content larger than the whole
// budget is not stored.
func (c *Cache) put(path, version string, content []byte) {
	if c == nil || version == "" || len(content) > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.files[path]; ok {
		c.bytes -= len(old.content)
		delete(c.files, path)
	}
	for k, f := range c.files {
		if c.bytes+len(content) <= c.maxBytes {
			break
		}
		c.bytes -= len(f.content)
		delete(c.files, k)
	}
	c.files[path] = cached{version: version, content: content}
	c.bytes += len(content)
}
