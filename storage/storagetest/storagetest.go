// Package storagetest is the conformance suite of [storage.Store]. Every
// implementation runs it — the S3 store, the local store and the change set
// of a build — so that the contract documented on storage.Store holds for
// all of them alike, and a caller need not know which one it was given.
//
//	func TestLocal(t *testing.T) {
//		storagetest.Run(t, func(t *testing.T) storage.Store {
//			s, err := storage.NewLocal(t.TempDir())
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/storage"
)

// Option changes how Run exercises a store.
type Option func(*config)

type config struct {
	project string // the one project the store serves; "" for any project
}

// SingleProject is for a store bound to one project, projectID (a build's
// change set): every case runs in that project, and instead of checking
// that projects are kept apart Run checks that every other project is
// refused with storage.ErrInvalidPath.
func SingleProject(projectID string) Option {
	return func(c *config) { c.project = projectID }
}

// Run checks that a Store keeps the contract documented on storage.Store.
// newStore returns an empty store (for SingleProject, with nothing in its
// project); it is called once per subtest, from parallel subtests.
func Run(t *testing.T, newStore func(t *testing.T) storage.Store, opts ...Option) {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}

	setup := func(t *testing.T) (storage.Store, string) {
		t.Helper()
		project := cfg.project
		if project == "" {
			project = uuid.NewString()
		}
		return newStore(t), project
	}
	ctx := context.Background()

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		binary := make([]byte, 256*3)
		for i := range binary {
			binary[i] = byte(i)
		}
		tests := []struct {
			name     string
			path     string
			wantPath string
			content  []byte
		}{
			{name: "Text", path: "README.md", wantPath: "README.md", content: []byte("# hello\n")},
			{name: "Binary", path: "img/logo.bin", wantPath: "img/logo.bin", content: binary},
			{name: "Empty", path: "empty", wantPath: "empty", content: []byte{}},
			{name: "Nested", path: "a/b/c/d.txt", wantPath: "a/b/c/d.txt", content: []byte("deep")},
			{name: "DotfileAndUnicode", path: ".config/été.json", wantPath: ".config/été.json", content: []byte("{}")},
			{name: "Normalised", path: "./src//x/../main.go/", wantPath: "src/main.go", content: []byte("package main")},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				s, project := setup(t)

				written, err := s.Write(ctx, project, tt.path, tt.content)
				if err != nil {
					t.Fatalf("Write: %v", err)
				}
				checkInfo(t, "Write", written, tt.wantPath, tt.content)

				got, read, err := s.Read(ctx, project, tt.path)
				if err != nil {
					t.Fatalf("Read: %v", err)
				}
				if !bytes.Equal(got, tt.content) {
					t.Errorf("Read content = %q, want %q", got, tt.content)
				}
				checkInfo(t, "Read", read, tt.wantPath, tt.content)
				if read.ETag != written.ETag {
					t.Errorf("Read ETag = %q, Write ETag = %q", read.ETag, written.ETag)
				}

				stat, err := s.Stat(ctx, project, tt.wantPath)
				if err != nil {
					t.Fatalf("Stat: %v", err)
				}
				checkInfo(t, "Stat", stat, tt.wantPath, tt.content)
				if stat.ETag != written.ETag {
					t.Errorf("Stat ETag = %q, Write ETag = %q", stat.ETag, written.ETag)
				}
			})
		}
	})

	t.Run("Overwrite", func(t *testing.T) {
		t.Parallel()
		s, project := setup(t)

		first := Write(t, s, project, "f.txt", "one")
		again := Write(t, s, project, "f.txt", "one")
		if again.ETag != first.ETag {
			t.Errorf("same content: ETag %q, then %q", first.ETag, again.ETag)
		}
		second := Write(t, s, project, "f.txt", "two, longer")
		if second.ETag == first.ETag {
			t.Errorf("new content kept ETag %q", first.ETag)
		}
		got, info, err := s.Read(ctx, project, "f.txt")
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if string(got) != "two, longer" || info.ETag != second.ETag {
			t.Errorf("Read = %q, ETag %q; want %q, ETag %q", got, info.ETag, "two, longer", second.ETag)
		}
	})

	t.Run("WriteIf", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name     string
			existing string // "" for no file
			ifMatch  func(existing storage.FileInfo) string
			wantErr  bool
		}{
			{name: "CreateWhenMissing", ifMatch: func(storage.FileInfo) string { return "" }},
			{name: "CreateWhenPresent", existing: "old", ifMatch: func(storage.FileInfo) string { return "" }, wantErr: true},
			{name: "MatchingVersion", existing: "old", ifMatch: func(fi storage.FileInfo) string { return fi.ETag }},
			{name: "StaleVersion", existing: "old", ifMatch: func(storage.FileInfo) string { return "0123456789abcdef0123456789abcdef" }, wantErr: true},
			{name: "VersionOfMissingFile", ifMatch: func(storage.FileInfo) string { return "0123456789abcdef0123456789abcdef" }, wantErr: true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				s, project := setup(t)
				var existing storage.FileInfo
				if tt.existing != "" {
					existing = Write(t, s, project, "f.txt", tt.existing)
				}

				info, err := s.WriteIf(ctx, project, "./f.txt", []byte("new"), tt.ifMatch(existing))
				if !tt.wantErr {
					if err != nil {
						t.Fatalf("WriteIf: %v", err)
					}
					checkInfo(t, "WriteIf", info, "f.txt", []byte("new"))
					if stat, err := s.Stat(ctx, project, "f.txt"); err != nil || stat.ETag != info.ETag {
						t.Errorf("Stat = %+v, %v; want ETag %q", stat, err, info.ETag)
					}
					return
				}
				var ce *storage.ConflictError
				if !errors.As(err, &ce) || !errors.Is(err, storage.ErrConflict) {
					t.Fatalf("WriteIf = %v, want a *ConflictError", err)
				}
				want := storage.ConflictError{Path: "f.txt", Exists: tt.existing != "", ETag: existing.ETag}
				if tt.existing != "" {
					want.Current = []byte(tt.existing)
				}
				if ce.Path != want.Path || ce.Exists != want.Exists || ce.ETag != want.ETag || !bytes.Equal(ce.Current, want.Current) {
					t.Errorf("conflict = %+v, want %+v", *ce, want)
				}
				want2 := "<missing>"
				if tt.existing != "" {
					want2 = tt.existing
				}
				got, _, err := s.Read(ctx, project, "f.txt")
				if errors.Is(err, storage.ErrNotFound) {
					got = []byte("<missing>")
				} else if err != nil {
					t.Fatal(err)
				}
				if string(got) != want2 {
					t.Errorf("after a refused WriteIf the file holds %q, want %q", got, want2)
				}
			})
		}
	})

	t.Run("DeleteIf", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name     string
			existing string // "" for no file
			ifMatch  func(existing storage.FileInfo) string
			wantErr  bool
		}{
			{name: "MatchingVersion", existing: "old", ifMatch: func(fi storage.FileInfo) string { return fi.ETag }},
			{name: "StaleVersion", existing: "old", ifMatch: func(storage.FileInfo) string { return "0123456789abcdef0123456789abcdef" }, wantErr: true},
			{name: "VersionOfMissingFile", ifMatch: func(storage.FileInfo) string { return "0123456789abcdef0123456789abcdef" }, wantErr: true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				s, project := setup(t)
				var existing storage.FileInfo
				if tt.existing != "" {
					existing = Write(t, s, project, "d/f.txt", tt.existing)
				}
				err := s.DeleteIf(ctx, project, "./d/f.txt", tt.ifMatch(existing))
				got, _, rerr := s.Read(ctx, project, "d/f.txt")
				if errors.Is(rerr, storage.ErrNotFound) {
					got = []byte("<missing>")
				} else if rerr != nil {
					t.Fatal(rerr)
				}
				if !tt.wantErr {
					if err != nil || string(got) != "<missing>" {
						t.Fatalf("DeleteIf = %v, the file then holds %q; want it gone", err, got)
					}
					return
				}
				var ce *storage.ConflictError
				if !errors.As(err, &ce) {
					t.Fatalf("DeleteIf = %v, want a *ConflictError", err)
				}
				if ce.Path != "d/f.txt" || ce.Exists != (tt.existing != "") || ce.ETag != existing.ETag || string(ce.Current) != tt.existing {
					t.Errorf("conflict = %+v, want the file's current state", *ce)
				}
				want := tt.existing
				if want == "" {
					want = "<missing>"
				}
				if string(got) != want {
					t.Errorf("after a refused DeleteIf the file holds %q, want %q", got, want)
				}
			})
		}
	})

	t.Run("WriteIfRace", func(t *testing.T) {
		t.Parallel()
		s, project := setup(t)
		base := Write(t, s, project, "hot.txt", "base")
		const writers = 8
		for _, ifMatch := range []string{base.ETag, ""} {
			path := "hot.txt"
			if ifMatch == "" {
				path = "new.txt"
			}
			var wg sync.WaitGroup
			errs := make([]error, writers)
			for i := range writers {
				wg.Go(func() {
					_, errs[i] = s.WriteIf(ctx, project, path, fmt.Appendf(nil, "writer %d", i), ifMatch)
				})
			}
			wg.Wait()
			won := 0
			for _, err := range errs {
				switch {
				case err == nil:
					won++
				case !errors.Is(err, storage.ErrConflict):
					t.Errorf("WriteIf(%q, %q) = %v, want nil or ErrConflict", path, ifMatch, err)
				}
			}
			if won != 1 {
				t.Errorf("WriteIf(%q, %q): %d of %d writers won, want exactly 1", path, ifMatch, won, writers)
			}
		}
	})

	t.Run("Missing", func(t *testing.T) {
		t.Parallel()
		s, project := setup(t)
		Write(t, s, project, "present.txt", "x")

		ops := []struct {
			name string
			call func(path string) error
		}{
			{name: "Read", call: func(p string) error { _, _, err := s.Read(ctx, project, p); return err }},
			{name: "Stat", call: func(p string) error { _, err := s.Stat(ctx, project, p); return err }},
			{name: "Delete", call: func(p string) error { return s.Delete(ctx, project, p) }},
			{name: "Move", call: func(p string) error { return s.Move(ctx, project, p, "target.txt", false) }},
		}
		for _, op := range ops {
			for _, p := range []string{"absent.txt", "present.txt/below", "dir/absent.txt"} {
				if err := op.call(p); !errors.Is(err, storage.ErrNotFound) {
					t.Errorf("%s(%q) = %v, want ErrNotFound", op.name, p, err)
				}
			}
		}
		if _, err := s.Stat(ctx, project, "target.txt"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Move of a missing file created the target: Stat = %v", err)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		s, project := setup(t)
		Write(t, s, project, "a/b.txt", "b")
		Write(t, s, project, "a/c.txt", "c")

		if err := s.Delete(ctx, project, "a/b.txt"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if _, _, err := s.Read(ctx, project, "a/b.txt"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Read after Delete = %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, project, "a/b.txt"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("second Delete = %v, want ErrNotFound", err)
		}
		CheckList(t, s, project, "", "a/c.txt")
	})

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		s, project := setup(t)
		files := []string{"b.txt", "a/z.txt", "a/b/c.txt", "a.txt", "ab/x.txt", "c/d/e/f.txt", ".hidden"}
		written := map[string]storage.FileInfo{}
		for _, f := range files {
			written[f] = Write(t, s, project, f, "content of "+f)
		}

		tests := []struct {
			name string
			dir  string
			want []string
		}{
			{name: "Root", dir: "", want: []string{".hidden", "a.txt", "a/b/c.txt", "a/z.txt", "ab/x.txt", "b.txt", "c/d/e/f.txt"}},
			{name: "RootDot", dir: ".", want: []string{".hidden", "a.txt", "a/b/c.txt", "a/z.txt", "ab/x.txt", "b.txt", "c/d/e/f.txt"}},
			{name: "RootSlash", dir: "/", want: []string{".hidden", "a.txt", "a/b/c.txt", "a/z.txt", "ab/x.txt", "b.txt", "c/d/e/f.txt"}},
			{name: "Subdir", dir: "a", want: []string{"a/b/c.txt", "a/z.txt"}},
			{name: "SubdirTrailingSlash", dir: "./a/", want: []string{"a/b/c.txt", "a/z.txt"}},
			{name: "Nested", dir: "c/d", want: []string{"c/d/e/f.txt"}},
			{name: "Missing", dir: "nope", want: []string{}},
			{name: "File", dir: "a.txt", want: []string{}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				got := CheckList(t, s, project, tt.dir, tt.want...)
				for _, fi := range got {
					w := written[fi.Path]
					if fi.Size != w.Size || fi.ETag != w.ETag || fi.ModTime.IsZero() {
						t.Errorf("List info %+v, Write info %+v", fi, w)
					}
				}
			})
		}
	})

	t.Run("ListEmptyProject", func(t *testing.T) {
		t.Parallel()
		s, project := setup(t)
		got, err := s.List(ctx, project, "")
		if err != nil || len(got) != 0 {
			t.Errorf("List = %v, %v; want empty, nil", got, err)
		}
	})

	t.Run("ProjectsIsolated", func(t *testing.T) {
		t.Parallel()
		s, p1 := setup(t)
		p2 := p1 + "x" // a prefix of p2 must not leak p2's files into p1
		if cfg.project != "" {
			checkOtherProjectRefused(t, s, p1, uuid.NewString())
			checkOtherProjectRefused(t, s, p1, p2)
			return
		}
		Write(t, s, p1, "same.txt", "one")
		Write(t, s, p2, "same.txt", "two")
		Write(t, s, p2, "only2.txt", "two")

		for project, want := range map[string]string{p1: "one", p2: "two"} {
			got, _, err := s.Read(ctx, project, "same.txt")
			if err != nil || string(got) != want {
				t.Errorf("Read(%s) = %q, %v; want %q", project, got, err, want)
			}
		}
		CheckList(t, s, p1, "", "same.txt")
		if _, err := s.Stat(ctx, p1, "only2.txt"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Stat of the other project's file = %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, p1, "same.txt"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		CheckList(t, s, p2, "", "only2.txt", "same.txt")
	})

	t.Run("Move", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name      string
			from, to  string
			overwrite bool
			existing  map[string]string
			wantErr   error
			want      map[string]string // every file afterwards
		}{
			{
				name: "Renames", from: "a.txt", to: "b.txt",
				existing: map[string]string{"a.txt": "A"},
				want:     map[string]string{"b.txt": "A"},
			},
			{
				name: "IntoNewDir", from: "a.txt", to: "x/y/a.txt",
				existing: map[string]string{"a.txt": "A"},
				want:     map[string]string{"x/y/a.txt": "A"},
			},
			{
				name: "OutOfDir", from: "x/y/a.txt", to: "a.txt",
				existing: map[string]string{"x/y/a.txt": "A"},
				want:     map[string]string{"a.txt": "A"},
			},
			{
				name: "SourceMissing", from: "missing.txt", to: "b.txt", overwrite: true,
				existing: map[string]string{"b.txt": "B"},
				wantErr:  storage.ErrNotFound,
				want:     map[string]string{"b.txt": "B"},
			},
			{
				name: "TargetExists", from: "a.txt", to: "b.txt",
				existing: map[string]string{"a.txt": "A", "b.txt": "B"},
				wantErr:  storage.ErrExists,
				want:     map[string]string{"a.txt": "A", "b.txt": "B"},
			},
			{
				name: "Overwrite", from: "a.txt", to: "b.txt", overwrite: true,
				existing: map[string]string{"a.txt": "A", "b.txt": "B"},
				want:     map[string]string{"b.txt": "A"},
			},
			{
				name: "OntoItself", from: "a.txt", to: "./a.txt",
				existing: map[string]string{"a.txt": "A"},
				wantErr:  storage.ErrExists,
				want:     map[string]string{"a.txt": "A"},
			},
			{
				name: "OntoItselfOverwrite", from: "a.txt", to: "a.txt", overwrite: true,
				existing: map[string]string{"a.txt": "A"},
				want:     map[string]string{"a.txt": "A"},
			},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				s, project := setup(t)
				for p, c := range tt.existing {
					Write(t, s, project, p, c)
				}

				err := s.Move(ctx, project, tt.from, tt.to, tt.overwrite)
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("Move = %v, want %v", err, tt.wantErr)
				}

				want := slices.Sorted(maps.Keys(tt.want))
				for _, fi := range CheckList(t, s, project, "", want...) {
					got, _, err := s.Read(ctx, project, fi.Path)
					if err != nil || string(got) != tt.want[fi.Path] {
						t.Errorf("Read(%q) = %q, %v; want %q", fi.Path, got, err, tt.want[fi.Path])
					}
				}
			})
		}
	})

	t.Run("InvalidPath", func(t *testing.T) {
		t.Parallel()
		s, project := setup(t)
		Write(t, s, project, "ok.txt", "ok")

		type op struct {
			name string
			call func(project, path string) error
		}
		fileOps := []op{
			{name: "Read", call: func(pr, p string) error { _, _, err := s.Read(ctx, pr, p); return err }},
			{name: "Write", call: func(pr, p string) error { _, err := s.Write(ctx, pr, p, []byte("x")); return err }},
			{name: "WriteIf", call: func(pr, p string) error { _, err := s.WriteIf(ctx, pr, p, []byte("x"), ""); return err }},
			{name: "Delete", call: func(pr, p string) error { return s.Delete(ctx, pr, p) }},
			{name: "Stat", call: func(pr, p string) error { _, err := s.Stat(ctx, pr, p); return err }},
			{name: "MoveFrom", call: func(pr, p string) error { return s.Move(ctx, pr, p, "moved.txt", true) }},
			{name: "MoveTo", call: func(pr, p string) error { return s.Move(ctx, pr, "ok.txt", p, true) }},
		}
		listOp := op{name: "List", call: func(pr, p string) error { _, err := s.List(ctx, pr, p); return err }}

		badPaths := []string{"../x", "/etc/passwd", "a/../../b", "a\\b", "a\x00b", "a\nb", "..", "./", "\xff"}
		for _, o := range append(fileOps, listOp) {
			for _, p := range append(badPaths, "") {
				if o.name == "List" && (p == "" || p == "./") {
					continue // the project root is a valid directory
				}
				if err := o.call(project, p); !errors.Is(err, storage.ErrInvalidPath) {
					t.Errorf("%s(%q) = %v, want ErrInvalidPath", o.name, p, err)
				}
			}
			for _, pr := range []string{"", ".", "..", "../" + project, project + "/sub", "a\x00b", ".hidden"} {
				p := "ok.txt"
				if err := o.call(pr, p); !errors.Is(err, storage.ErrInvalidPath) {
					t.Errorf("%s with project %q = %v, want ErrInvalidPath", o.name, pr, err)
				}
			}
		}
		CheckList(t, s, project, "", "ok.txt")
	})

	t.Run("CancelledContext", func(t *testing.T) {
		t.Parallel()
		s, project := setup(t)
		Write(t, s, project, "ok.txt", "ok")
		cancelled, cancel := context.WithCancel(ctx)
		cancel()

		ops := []struct {
			name string
			call func() error
		}{
			{name: "Read", call: func() error { _, _, err := s.Read(cancelled, project, "ok.txt"); return err }},
			{name: "Write", call: func() error { _, err := s.Write(cancelled, project, "new.txt", []byte("x")); return err }},
			{name: "WriteIf", call: func() error { _, err := s.WriteIf(cancelled, project, "new.txt", []byte("x"), ""); return err }},
			{name: "Delete", call: func() error { return s.Delete(cancelled, project, "ok.txt") }},
			{name: "Stat", call: func() error { _, err := s.Stat(cancelled, project, "ok.txt"); return err }},
			{name: "List", call: func() error { _, err := s.List(cancelled, project, ""); return err }},
			{name: "Move", call: func() error { return s.Move(cancelled, project, "ok.txt", "moved.txt", true) }},
		}
		for _, op := range ops {
			if err := op.call(); !errors.Is(err, context.Canceled) {
				t.Errorf("%s = %v, want context.Canceled", op.name, err)
			}
		}
		CheckList(t, s, project, "", "ok.txt")
	})

	t.Run("ConcurrentWrites", func(t *testing.T) {
		t.Parallel()
		s, project := setup(t)
		const writers, rounds = 4, 5
		contents := make([][]byte, writers)
		for i := range contents {
			contents[i] = bytes.Repeat([]byte{byte('a' + i)}, 64<<10+i)
		}
		Write(t, s, project, "hot.bin", string(contents[0]))

		var wg sync.WaitGroup
		errs := make(chan error, writers*rounds*2)
		for i := range writers {
			wg.Go(func() {
				for range rounds {
					if _, err := s.Write(ctx, project, "hot.bin", contents[i]); err != nil {
						errs <- err
					}
					got, _, err := s.Read(ctx, project, "hot.bin")
					if err != nil {
						errs <- err
					} else if !slices.ContainsFunc(contents, func(c []byte) bool { return bytes.Equal(c, got) }) {
						errs <- fmt.Errorf("read a torn file of %d bytes", len(got))
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		CheckList(t, s, project, "", "hot.bin")
	})
}

// checkOtherProjectRefused checks that a store bound to project refuses
// every call on other, and that nothing reached project.
func checkOtherProjectRefused(t *testing.T, s storage.Store, project, other string) {
	t.Helper()
	ctx := context.Background()
	Write(t, s, project, "f.txt", "mine")
	calls := []struct {
		name string
		call func() error
	}{
		{name: "Read", call: func() error { _, _, err := s.Read(ctx, other, "f.txt"); return err }},
		{name: "Write", call: func() error { _, err := s.Write(ctx, other, "g.txt", []byte("x")); return err }},
		{name: "WriteIf", call: func() error { _, err := s.WriteIf(ctx, other, "g.txt", []byte("x"), ""); return err }},
		{name: "Delete", call: func() error { return s.Delete(ctx, other, "f.txt") }},
		{name: "Stat", call: func() error { _, err := s.Stat(ctx, other, "f.txt"); return err }},
		{name: "List", call: func() error { _, err := s.List(ctx, other, ""); return err }},
		{name: "Move", call: func() error { return s.Move(ctx, other, "f.txt", "g.txt", true) }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, storage.ErrInvalidPath) {
			t.Errorf("%s in project %q of a store bound to %q = %v, want ErrInvalidPath", c.name, other, project, err)
		}
	}
	CheckList(t, s, project, "", "f.txt")
}

// Write writes content to path and fails the test on an error.
func Write(t testing.TB, s storage.Store, project, path, content string) storage.FileInfo {
	t.Helper()
	info, err := s.Write(context.Background(), project, path, []byte(content))
	if err != nil {
		t.Fatalf("Write(%q): %v", path, err)
	}
	return info
}

// CheckList lists dir and checks that it holds exactly the paths want, in
// that order. It returns the listing.
func CheckList(t testing.TB, s storage.Store, project, dir string, want ...string) []storage.FileInfo {
	t.Helper()
	got, err := s.List(context.Background(), project, dir)
	if err != nil {
		t.Fatalf("List(%q): %v", dir, err)
	}
	paths := make([]string, 0, len(got))
	for _, fi := range got {
		paths = append(paths, fi.Path)
	}
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(paths, want) {
		t.Errorf("List(%q) = %q, want %q", dir, paths, want)
	}
	return got
}

func checkInfo(t *testing.T, op string, info storage.FileInfo, wantPath string, content []byte) {
	t.Helper()
	if info.Path != wantPath || info.Size != int64(len(content)) || info.ETag == "" || info.ModTime.IsZero() {
		t.Errorf("%s info = %+v, want path %q, size %d, an ETag and a ModTime", op, info, wantPath, len(content))
	}
}
