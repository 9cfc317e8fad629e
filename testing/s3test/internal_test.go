package s3test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWithoutMinioEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{name: "Empty", in: nil, want: []string{}},
		{name: "KeepsOthers", in: []string{"HOME=/root", "PATH=/bin"}, want: []string{"HOME=/root", "PATH=/bin"}},
		{name: "DropsMinio", in: []string{"MINIO_VOLUMES=/x", "HOME=/root", "MINIO_ROOT_USER=u"}, want: []string{"HOME=/root"}},
		{name: "KeepsLookalikes", in: []string{"XMINIO_A=1", "minio_b=2"}, want: []string{"XMINIO_A=1", "minio_b=2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := withoutMinioEnv(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("withoutMinioEnv(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestFindMinio changes the environment, so it cannot run in parallel.
func TestFindMinio(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "minio")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("MinioBin", func(t *testing.T) {
		t.Setenv("MINIO_BIN", bin)
		if got, err := findMinio(); err != nil || got != bin {
			t.Errorf("findMinio() = %q, %v; want %q", got, err, bin)
		}
	})

	t.Run("MinioBinMissing", func(t *testing.T) {
		t.Setenv("MINIO_BIN", filepath.Join(dir, "absent"))
		if _, err := findMinio(); err == nil || errors.Is(err, errNoServer) {
			t.Errorf("findMinio() = %v; want an error that is not errNoServer", err)
		}
	})

	t.Run("GOBIN", func(t *testing.T) {
		t.Setenv("MINIO_BIN", "")
		t.Setenv("PATH", "")
		t.Setenv("GOBIN", dir)
		if got, err := findMinio(); err != nil || got != bin {
			t.Errorf("findMinio() = %q, %v; want %q", got, err, bin)
		}
	})

	t.Run("Nowhere", func(t *testing.T) {
		t.Setenv("MINIO_BIN", "")
		t.Setenv("PATH", "")
		t.Setenv("GOBIN", "")
		t.Setenv("GOPATH", dir)
		t.Setenv("HOME", dir)
		if _, err := findMinio(); !errors.Is(err, errNoServer) {
			t.Errorf("findMinio() = %v, want errNoServer", err)
		}
	})
}

func TestProcessAlive(t *testing.T) {
	t.Parallel()
	if !processAlive(os.Getpid()) {
		t.Error("processAlive(own pid) = false")
	}
}
