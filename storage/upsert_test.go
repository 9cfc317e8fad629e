package storage_test

import (
	"errors"
	"testing"

	"github.com/agentworker/agentworker/storage"
)

// TestUpsertOnAPlainStore: on a store that cannot tell by itself, Upsert
// looks the file up before writing it; a lookup that fails writes nothing.
func TestUpsertOnAPlainStore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		info, created, err := storage.Upsert(ctx, s, "p", "a.txt", []byte("v"+string(rune('0'+i))))
		if err != nil || created != want || info.Size != 2 {
			t.Fatalf("upsert %d: created %v, size %d, err %v; want created %v, size 2", i+1, created, info.Size, err, want)
		}
	}
	if _, _, err := storage.Upsert(ctx, s, "p", "../escape.txt", []byte("x")); !errors.Is(err, storage.ErrInvalidPath) {
		t.Fatalf("upsert outside the project: err %v, want ErrInvalidPath", err)
	}
	if files, err := s.List(ctx, "p", ""); err != nil || len(files) != 1 {
		t.Fatalf("project holds %v (err %v), want only a.txt", files, err)
	}
}
