package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestGCSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	limited := file("limited", "1000000000\n")
	unlimited := file("unlimited", "max\n")
	for _, tc := range []struct {
		name                 string
		env                  map[string]string
		limitFile            string
		percent              int
		limit                int64
		setPercent, setLimit bool
	}{
		{"Defaults", nil, unlimited, defaultGCPercent, 0, true, false},
		{"NoCgroupFile", nil, filepath.Join(dir, "missing"), defaultGCPercent, 0, true, false},
		{"ContainerLimit", nil, limited, defaultGCPercent, 900000000, true, true},
		{"GOGCSetIsLeftAlone", map[string]string{"GOGC": "100"}, limited, 0, 900000000, false, true},
		{"GOGCOffIsLeftAlone", map[string]string{"GOGC": "off"}, unlimited, 0, 0, false, false},
		{"GOMEMLIMITSetIsLeftAlone", map[string]string{"GOMEMLIMIT": "512MiB"}, limited, defaultGCPercent, 0, true, false},
		{"GarbageInLimitFile", nil, file("garbage", "lots\n"), defaultGCPercent, 0, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			percent, limit, setPercent, setLimit := gcSettings(func(k string) string { return tc.env[k] }, tc.limitFile)
			if percent != tc.percent || limit != tc.limit || setPercent != tc.setPercent || setLimit != tc.setLimit {
				t.Errorf("gcSettings = %d, %d, %v, %v; want %d, %d, %v, %v",
					percent, limit, setPercent, setLimit, tc.percent, tc.limit, tc.setPercent, tc.setLimit)
			}
		})
	}
}
