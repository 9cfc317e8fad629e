package tools

import "sync"

// Cache keeps file contents keyed by path and version (the ETag a listing
// reports), up to a byte budget. A file whose version changed is simply not
// found, so the cache never serves stale content. The zero of *Cache (nil)
// caches nothing. It is safe for concurrent use.
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

// put stores content, replacing the path's older version; content that
// does not fit the budget is not stored.
func (c *Cache) put(path, version string, content []byte) {
	if c == nil || version == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.files[path]
	size := c.bytes - len(old.content) + len(content)
	if size > c.maxBytes {
		return
	}
	c.files[path] = cached{version: version, content: content}
	c.bytes = size
}
