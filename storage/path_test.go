package storage_test

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/storage"
)

func TestCleanPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string // "" means ErrInvalidPath
	}{
		{in: "a.txt", want: "a.txt"},
		{in: "./a.txt", want: "a.txt"},
		{in: "a/b/c.txt", want: "a/b/c.txt"},
		{in: "a/b/", want: "a/b"},
		{in: "a//b", want: "a/b"},
		{in: "a/./b", want: "a/b"},
		{in: "a/../b", want: "b"},
		{in: "a/b/../../c", want: "c"},
		{in: ".hidden", want: ".hidden"},
		{in: "..foo", want: "..foo"},
		{in: "foo..", want: "foo.."},
		{in: "a/..b/c", want: "a/..b/c"},
		{in: "with space/é.txt", want: "with space/é.txt"},
		{in: "././a", want: "a"},
		{in: ".//a", want: "a"},
		{in: ".//etc/passwd", want: "etc/passwd"},
		{in: ""},
		{in: "."},
		{in: "./"},
		{in: ".//"},
		{in: "/"},
		{in: "/etc/passwd"},
		{in: "//x"},
		{in: ".."},
		{in: "../x"},
		{in: "./../x"},
		{in: "a/../.."},
		{in: "a/../../b"},
		{in: "a/.."},
		{in: "a\\b"},
		{in: "..\\x"},
		{in: "a\x00b"},
		{in: "a\nb"},
		{in: "a\tb"},
		{in: "a\x7fb"},
		{in: "\xff\xfe"},
	}
	for _, tt := range tests {
		t.Run(strings.ToValidUTF8(tt.in, "?"), func(t *testing.T) {
			t.Parallel()
			got, err := storage.CleanPath(tt.in)
			if tt.want == "" {
				if !errors.Is(err, storage.ErrInvalidPath) {
					t.Fatalf("CleanPath(%q) = %q, %v; want ErrInvalidPath", tt.in, got, err)
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.in)) {
					t.Errorf("error %q does not quote the input %q", err, tt.in)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("CleanPath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestCleanDir(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    string
		invalid bool
	}{
		{in: "", want: ""},
		{in: ".", want: ""},
		{in: "./", want: ""},
		{in: "/", want: ""},
		{in: "a/..", want: ""},
		{in: "a", want: "a"},
		{in: "./a/b/", want: "a/b"},
		{in: "/a", invalid: true},
		{in: "..", invalid: true},
		{in: "../a", invalid: true},
		{in: "a\\b", invalid: true},
		{in: "a\x00", invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := storage.CleanDir(tt.in)
			if tt.invalid {
				if !errors.Is(err, storage.ErrInvalidPath) {
					t.Errorf("CleanDir(%q) = %q, %v; want ErrInvalidPath", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("CleanDir(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func FuzzCleanPath(f *testing.F) {
	for _, seed := range []string{"a", "./a/b/", "../a", "a/../../b", "/x", "a\\b", "a\x00b", "..", "a/./b//c", "é"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := storage.CleanPath(in)
		if err != nil {
			if !errors.Is(err, storage.ErrInvalidPath) {
				t.Fatalf("CleanPath(%q) error %v does not wrap ErrInvalidPath", in, err)
			}
			return
		}
		if got == "" || got == "." || strings.HasPrefix(got, "/") || strings.HasSuffix(got, "/") {
			t.Fatalf("CleanPath(%q) = %q: not a relative file path", in, got)
		}
		if got == ".." || strings.HasPrefix(got, "../") || path.Clean(got) != got {
			t.Fatalf("CleanPath(%q) = %q: not clean or escapes", in, got)
		}
		if strings.ContainsAny(got, "\\\x00") {
			t.Fatalf("CleanPath(%q) = %q: forbidden character", in, got)
		}
		if again, err := storage.CleanPath(got); err != nil || again != got {
			t.Fatalf("CleanPath(%q) = %q, %v: not idempotent", got, again, err)
		}
	})
}

// TestCleanPathBounds: a segment may be 255 bytes and a path 1024, what
// file systems and S3 keys hold; past them the path is refused, and the
// error quotes only its start.
func TestCleanPathBounds(t *testing.T) {
	t.Parallel()
	seg255 := strings.Repeat("a", 255)
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"Segment255", seg255, true},
		{"Segment256", strings.Repeat("a", 256), false},
		{"DeepSegment256", "src/" + strings.Repeat("é", 128), false}, // 256 bytes
		{"Path1024", strings.Repeat(strings.Repeat("b", 99)+"/", 10) + strings.Repeat("c", 24), true},
		{"Path1025", strings.Repeat(strings.Repeat("b", 99)+"/", 10) + strings.Repeat("c", 25), false},
		{"Path900k", strings.Repeat("d/", 450_000), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := storage.CleanPath(tt.in)
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, storage.ErrInvalidPath)) {
				t.Fatalf("CleanPath(%d bytes) = %v, want ok %v", len(tt.in), err, tt.ok)
			}
			if err != nil && len(err.Error()) > 300 {
				t.Errorf("error of %d bytes for a %d-byte path", len(err.Error()), len(tt.in))
			}
		})
	}
}
