package storage_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/storagetest"
)

func TestLocal(t *testing.T) {
	t.Parallel()
	storagetest.Run(t, func(t *testing.T) storage.Store {
		t.Helper()
		s, err := storage.NewLocal(t.TempDir())
		if err != nil {
			t.Fatalf("NewLocal: %v", err)
		}
		return s
	})
}

func setupLocal(t *testing.T) (*storage.Local, string, string) {
	t.Helper()
	root := t.TempDir()
	s, err := storage.NewLocal(root)
	if err != nil {
		t.Fatalf("NewLocal: %v", err)
	}
	return s, root, uuid.NewString()
}

func TestNewLocal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CreatesRoot", func(t *testing.T) {
		t.Parallel()
		root := filepath.Join(t.TempDir(), "a", "b")
		s, err := storage.NewLocal(root)
		if err != nil {
			t.Fatalf("NewLocal: %v", err)
		}
		if err := s.Ping(ctx); err != nil {
			t.Errorf("Ping: %v", err)
		}
	})

	t.Run("EmptyRoot", func(t *testing.T) {
		t.Parallel()
		if _, err := storage.NewLocal(""); err == nil {
			t.Error("NewLocal(\"\") succeeded")
		}
	})

	t.Run("RootIsAFile", func(t *testing.T) {
		t.Parallel()
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := storage.NewLocal(file); err == nil {
			t.Errorf("NewLocal(%q) on a file succeeded", file)
		}
	})

	t.Run("PingAfterRootRemoved", func(t *testing.T) {
		t.Parallel()
		s, root, _ := setupLocal(t)
		if err := os.RemoveAll(root); err != nil {
			t.Fatal(err)
		}
		if err := s.Ping(ctx); err == nil {
			t.Error("Ping succeeded without a root")
		}
	})
}

func TestLocalLayout(t *testing.T) {
	t.Parallel()
	s, root, project := setupLocal(t)
	storagetest.Write(t, s, project, "src/main.go", "package main")

	got, err := os.ReadFile(filepath.Join(root, project, "src", "main.go"))
	if err != nil || string(got) != "package main" {
		t.Errorf("file on disk = %q, %v", got, err)
	}
	staged, err := os.ReadDir(filepath.Join(root, ".staging"))
	if err != nil || len(staged) != 0 {
		t.Errorf("staging directory holds %v, %v; want nothing", staged, err)
	}
}

func TestLocalDeletePrunesEmptyDirs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, root, project := setupLocal(t)
	storagetest.Write(t, s, project, "a/b/c.txt", "c")
	storagetest.Write(t, s, project, "a/d.txt", "d")

	if err := s.Delete(ctx, project, "a/b/c.txt"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, project, "a", "b")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a/b still there: %v", err)
	}
	if err := s.Delete(ctx, project, "a/d.txt"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	entries, err := os.ReadDir(filepath.Join(root, project))
	if err != nil || len(entries) != 0 {
		t.Errorf("project directory holds %v, %v; want it empty and kept", entries, err)
	}

	storagetest.Write(t, s, project, "m/n/o.txt", "o")
	if err := s.Move(ctx, project, "m/n/o.txt", "o.txt", false); err != nil {
		t.Fatalf("Move: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, project, "m")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("m still there after moving its only file: %v", err)
	}
}

func TestLocalSymlinks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, root, project := setupLocal(t)
	storagetest.Write(t, s, project, "inside.txt", "inside")

	outsideDir := t.TempDir()
	outside := filepath.Join(outsideDir, "secret.txt")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	projectDir := filepath.Join(root, project)
	links := map[string]string{
		"file-out": outside,
		"dir-out":  outsideDir,
		"file-in":  "inside.txt",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(projectDir, name)); err != nil {
			t.Fatal(err)
		}
	}

	ops := []struct {
		name string
		call func(p string) error
	}{
		{name: "Read", call: func(p string) error { _, _, err := s.Read(ctx, project, p); return err }},
		{name: "Stat", call: func(p string) error { _, err := s.Stat(ctx, project, p); return err }},
		{name: "Write", call: func(p string) error { _, err := s.Write(ctx, project, p, []byte("x")); return err }},
		{name: "Delete", call: func(p string) error { return s.Delete(ctx, project, p) }},
		{name: "MoveFrom", call: func(p string) error { return s.Move(ctx, project, p, "moved.txt", true) }},
		{name: "MoveTo", call: func(p string) error { return s.Move(ctx, project, "inside.txt", p, true) }},
		{name: "List", call: func(p string) error { _, err := s.List(ctx, project, p); return err }},
	}
	for _, op := range ops {
		for _, p := range []string{"file-out", "dir-out/secret.txt", "file-in", "dir-out/new.txt"} {
			if op.name == "List" && p != "dir-out/secret.txt" {
				p = "dir-out"
			}
			if err := op.call(p); !errors.Is(err, storage.ErrInvalidPath) {
				t.Errorf("%s(%q) = %v, want ErrInvalidPath", op.name, p, err)
			}
		}
	}

	storagetest.CheckList(t, s, project, "", "inside.txt")
	if got, err := os.ReadFile(outside); err != nil || string(got) != "secret" {
		t.Errorf("outside file = %q, %v; want it untouched", got, err)
	}
	if entries, _ := os.ReadDir(outsideDir); len(entries) != 1 {
		t.Errorf("outside directory holds %d entries, want 1", len(entries))
	}

	t.Run("ProjectDirIsSymlink", func(t *testing.T) {
		t.Parallel()
		linked := uuid.NewString()
		if err := os.Symlink(outsideDir, filepath.Join(root, linked)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Read(ctx, linked, "secret.txt"); !errors.Is(err, storage.ErrInvalidPath) {
			t.Errorf("Read = %v, want ErrInvalidPath", err)
		}
		if _, err := s.List(ctx, linked, ""); !errors.Is(err, storage.ErrInvalidPath) {
			t.Errorf("List = %v, want ErrInvalidPath", err)
		}
	})
}

func TestLocalWriteOverDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, project := setupLocal(t)
	storagetest.Write(t, s, project, "a/b.txt", "b")

	if _, err := s.Write(ctx, project, "a", []byte("x")); !errors.Is(err, storage.ErrInvalidPath) {
		t.Errorf("Write over a directory = %v, want ErrInvalidPath", err)
	}
	if _, err := s.Write(ctx, project, "a/b.txt/c", []byte("x")); !errors.Is(err, storage.ErrInvalidPath) {
		t.Errorf("Write below a file = %v, want ErrInvalidPath", err)
	}
	if _, _, err := s.Read(ctx, project, "a"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Read of a directory = %v, want ErrNotFound", err)
	}
	got := storagetest.CheckList(t, s, project, "", "a/b.txt")
	if !slices.ContainsFunc(got, func(fi storage.FileInfo) bool { return fi.Size == 1 }) {
		t.Errorf("List = %+v", got)
	}
}
