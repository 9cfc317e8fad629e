package storage_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/s3test"
)

func TestCheckServiceKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"_archive/", true},
		{"_archive/p/t.jsonl.gz", true},
		{"_x", true},
		{"archive/", false}, // a project id could be "archive"
		{"0b8f3f4e-0000-4000-8000-000000000000/a", false},
		{"", false},
		{"/_archive/", false},
		{"_archive/../p/a", false},
		{"_archive//a", false},
		{"_archive/./a", false},
		{"_archive\\a", false},
		{"_archive/\x00", false},
		{"\xff", false},
		{"_" + strings.Repeat("a", storage.MaxPathBytes), false},
	} {
		err := storage.CheckServiceKey(tc.key)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, storage.ErrInvalidPath) {
			t.Errorf("CheckServiceKey(%q) = %v, want ok %t", tc.key, err, tc.ok)
		}
	}
}

// A service object is outside every project: no project id or path names
// it, no listing shows it, and the service methods reach no project file.
func TestServiceObjectsAreOutsideProjects(t *testing.T) {
	t.Parallel()
	s := s3test.NewStore(t)
	ctx := t.Context()
	const project = "0b8f3f4e-0000-4000-8000-000000000001"
	if _, err := s.Write(ctx, project, "a.txt", []byte("project file")); err != nil {
		t.Fatal(err)
	}
	secret := []byte("archived timeline")
	if _, err := s.PutService(ctx, "_archive/"+project+"/t.jsonl.gz", bytes.NewReader(secret), int64(len(secret))); err != nil {
		t.Fatal(err)
	}

	files, err := s.List(ctx, project, "")
	if err != nil || len(files) != 1 || files[0].Path != "a.txt" {
		t.Errorf("List(project) = %+v, %v: want only a.txt", files, err)
	}
	for _, tc := range []struct{ project, path string }{
		{"_archive", project + "/t.jsonl.gz"},
		{project, "../_archive/" + project + "/t.jsonl.gz"},
		{project, "/_archive/" + project + "/t.jsonl.gz"},
		{"..", "_archive/" + project + "/t.jsonl.gz"},
		{".", "_archive/" + project + "/t.jsonl.gz"},
	} {
		if _, _, err := s.Read(ctx, tc.project, tc.path); !errors.Is(err, storage.ErrInvalidPath) {
			t.Errorf("Read(%q, %q) = %v, want ErrInvalidPath", tc.project, tc.path, err)
		}
		if _, err := s.List(ctx, tc.project, ""); tc.project != project && !errors.Is(err, storage.ErrInvalidPath) {
			t.Errorf("List(%q) = %v, want ErrInvalidPath", tc.project, err)
		}
	}
	// The service methods refuse a project's keys.
	if _, _, err := s.OpenService(ctx, project+"/a.txt"); !errors.Is(err, storage.ErrInvalidPath) {
		t.Errorf("OpenService(project file) = %v, want ErrInvalidPath", err)
	}
	if err := s.RemoveService(ctx, project+"/a.txt"); !errors.Is(err, storage.ErrInvalidPath) {
		t.Errorf("RemoveService(project file) = %v, want ErrInvalidPath", err)
	}

	body, info, err := s.OpenService(ctx, "_archive/"+project+"/t.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	_ = body.Close()
	if err != nil || !bytes.Equal(got, secret) || info.Size != int64(len(secret)) {
		t.Errorf("OpenService read %q (%+v), %v", got, info, err)
	}
	if _, _, err := s.OpenService(ctx, "_archive/missing"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("OpenService(missing) = %v, want ErrNotFound", err)
	}
	for range 2 { // a missing object is no error
		if err := s.RemoveService(ctx, "_archive/"+project+"/t.jsonl.gz"); err != nil {
			t.Fatal(err)
		}
	}
	if objs, err := s.ListService(ctx, "_archive/"); err != nil || len(objs) != 0 {
		t.Errorf("ListService after the removal = %+v, %v", objs, err)
	}
}
