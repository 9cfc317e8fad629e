package tools

import "testing"

func TestCacheVersionsAndBudget(t *testing.T) {
	t.Parallel()
	c := NewCache(10)
	c.put("p/a", "v1", []byte("aaaa"))
	if got, ok := c.get("p/a", "v1"); !ok || string(got) != "aaaa" {
		t.Fatalf("get(a, v1) = %q, %v", got, ok)
	}
	if _, ok := c.get("p/a", "v2"); ok {
		t.Fatal("a stale version was served")
	}
	c.put("p/a", "v2", []byte("AAAA"))
	if _, ok := c.get("p/a", "v1"); ok {
		t.Fatal("the replaced version is still served")
	}
	c.put("p/b", "v1", []byte("bbbbbb"))
	c.put("p/c", "v1", []byte("cccc")) // over budget: something is evicted
	if c.bytes > 10 {
		t.Fatalf("cache holds %d bytes over its 10-byte budget", c.bytes)
	}
	if _, ok := c.get("p/c", "v1"); !ok {
		t.Fatal("the newest entry was not stored")
	}
	c.put("p/huge", "v1", make([]byte, 11))
	if _, ok := c.get("p/huge", "v1"); ok {
		t.Fatal("content over the whole budget was stored")
	}
	var none *Cache
	none.put("x", "v", []byte("x"))
	if _, ok := none.get("x", "v"); ok {
		t.Fatal("the nil cache served content")
	}
}
