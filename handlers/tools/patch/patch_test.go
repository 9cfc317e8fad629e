package patch

import (
	"errors"
	"strings"
	"testing"
)

func TestReplace(t *testing.T) {
	t.Parallel()
	file := "func a() {\n\tif x {\n\t\treturn 1\n\t}\n}\n"
	tests := []struct {
		name      string
		content   string
		old, new  string
		all       bool
		want      string
		wantLayer Layer
		wantErr   any
	}{
		{name: "Exact", content: file, old: "return 1", new: "return 2", want: strings.Replace(file, "return 1", "return 2", 1), wantLayer: Exact},
		{name: "TrailingWhitespace", content: "a  \nb\t\nc\n", old: "a\nb\n", new: "x\ny\n", want: "x\ny\nc\n", wantLayer: TrailingWhitespace},
		{name: "Reindented", content: file, old: "if x {\n    return 1\n}", new: "if y {\n    return 3\n}",
			want: "func a() {\n\tif y {\n\t\treturn 3\n\t}\n}\n", wantLayer: Indentation},
		{name: "Ambiguous", content: "x\ny\nx\n", old: "x", new: "z", wantErr: new(*AmbiguousError)},
		{name: "ReplaceAll", content: "x\ny\nx\n", old: "x", new: "z", all: true, want: "z\ny\nz\n", wantLayer: Exact},
		{name: "NotFound", content: file, old: "return 7\n", new: "", wantErr: new(*NotFoundError)},
		{name: "Empty", content: file, old: "", wantErr: &ErrEmptySnippet},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Replace(tt.content, tt.old, tt.new, tt.all)
			if tt.wantErr != nil {
				checkErr(t, err, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Content != tt.want || got.Layer != tt.wantLayer {
				t.Fatalf("got %q (%s), want %q (%s)", got.Content, got.Layer, tt.want, tt.wantLayer)
			}
		})
	}
}

func checkErr(t *testing.T, err error, want any) {
	t.Helper()
	switch w := want.(type) {
	case **AmbiguousError:
		if !errors.As(err, w) {
			t.Fatalf("err = %v, want AmbiguousError", err)
		}
	case **NotFoundError:
		if !errors.As(err, w) {
			t.Fatalf("err = %v, want NotFoundError", err)
		}
	case *error:
		if !errors.Is(err, *w) {
			t.Fatalf("err = %v, want %v", err, *w)
		}
	}
}

func TestNotFoundShowsNearestWindow(t *testing.T) {
	t.Parallel()
	content := "a\nb\nconst  greeting = 'hi'\nc\n"
	_, err := Replace(content, "const greeting = \"hi\"", "x", false)
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.Line != 3 || !strings.Contains(nf.Window, "const··greeting") {
		t.Fatalf("err = %v", err)
	}
}

func TestReplaceLines(t *testing.T) {
	t.Parallel()
	got, err := ReplaceLines("a\nb\nc\n", 2, 2, "x\ny\n")
	if err != nil || got != "a\nx\ny\nc\n" {
		t.Fatalf("got %q, %v", got, err)
	}
	if got, err := ReplaceLines("a\n", 2, 1, "z"); err != nil || got != "a\nz\n" {
		t.Fatalf("append: got %q, %v", got, err)
	}
	var re *RangeError
	if _, err := ReplaceLines("a\n", 3, 3, "z"); !errors.As(err, &re) {
		t.Fatalf("err = %v", err)
	}
}

func TestParseAndApply(t *testing.T) {
	t.Parallel()
	base := "package main\n\nfunc main() {\n\tprintln(\"a\")\n}\n"
	want := "package main\n\nfunc main() {\n\tprintln(\"b\")\n}\n"
	tests := []struct {
		name  string
		patch string
		ops   []Kind
	}{
		{name: "Unified", ops: []Kind{Update}, patch: "--- a/main.go\n+++ b/main.go\n@@ -3,3 +3,3 @@\n func main() {\n-\tprintln(\"a\")\n+\tprintln(\"b\")\n }\n"},
		{name: "UnifiedNoCounts", ops: []Kind{Update}, patch: "--- main.go\n+++ main.go\n@@\n func main() {\n-\tprintln(\"a\")\n+\tprintln(\"b\")\n"},
		{name: "V4A", ops: []Kind{Update, Add, Delete}, patch: "*** Begin Patch\n*** Update File: main.go\n@@ func main() {\n-\tprintln(\"a\")\n+\tprintln(\"b\")\n*** Add File: new.txt\n+hello\n*** Delete File: old.txt\n*** End Patch\n"},
		{name: "V4AIndentLost", ops: []Kind{Update}, patch: "*** Begin Patch\n*** Update File: main.go\n func main() {\n-  println(\"a\")\n+  println(\"b\")\n }\n*** End Patch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ops, err := Parse(tt.patch)
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) != len(tt.ops) {
				t.Fatalf("ops = %+v", ops)
			}
			for i, k := range tt.ops {
				if ops[i].Kind != k {
					t.Fatalf("op %d = %s, want %s", i, ops[i].Kind, k)
				}
			}
			got, err := ApplyHunks("main.go", base, ops[0].Hunks)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
	}
}

func TestApplyHunksAllOrNothing(t *testing.T) {
	t.Parallel()
	ops, err := Parse("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n@@ -5 +5 @@\n-missing\n+z\n")
	if err != nil {
		t.Fatal(err)
	}
	var he *HunkError
	var nf *NotFoundError
	if _, err := ApplyHunks("x", "a\nc\n", ops[0].Hunks); !errors.As(err, &he) || he.Index != 2 || !errors.As(err, &nf) {
		t.Fatalf("err = %v, want hunk 2 not found", err)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "hello", "*** Begin Patch\n*** Update File: a\n", "*** Begin Patch\nnonsense\n*** End Patch", "@@ -1 +1 @@\n-a\n+b\n"} {
		if _, err := Parse(p); err == nil {
			t.Errorf("Parse(%q) succeeded", p)
		}
	}
}

// FuzzParse checks that no patch text makes the parser or the applier
// panic, and that applying is deterministic.
func FuzzParse(f *testing.F) {
	f.Add("--- a/main.go\n+++ b/main.go\n@@ -3,3 +3,3 @@\n func main() {\n-\tprintln(\"a\")\n+\tprintln(\"b\")\n }\n", "func main() {\n\tprintln(\"a\")\n}\n")
	f.Add("*** Begin Patch\n*** Update File: a\n@@ x\n-y\n+z\n*** Move to: b\n*** End Patch\n", "x\ny\n")
	f.Add("diff --git a/x b/y\nrename from x\nrename to y\n", "")
	f.Add("*** Begin Patch\n*** Add File: n\n+1\n*** End Patch", "")
	f.Fuzz(func(t *testing.T, p, content string) {
		ops, err := Parse(p)
		if err != nil {
			return
		}
		for _, op := range ops {
			a, errA := ApplyHunks(op.Path, content, op.Hunks)
			b, errB := ApplyHunks(op.Path, content, op.Hunks)
			if a != b || (errA == nil) != (errB == nil) {
				t.Fatalf("nondeterministic apply")
			}
		}
	})
}

// FuzzReplace checks that edits never panic and that a successful exact
// substring replacement contains the new text (line endings as the file has them).
func FuzzReplace(f *testing.F) {
	f.Add("a\nb\nc\n", "b", "x", false)
	f.Add("\tif x {\n\t\ty()\n\t}\n", "if x {\n  y()\n}", "if z {\n  w()\n}", false)
	f.Add("x x x", "x", "y", true)
	f.Fuzz(func(t *testing.T, content, old, new string, all bool) {
		e, err := Replace(content, old, new, all)
		if err != nil {
			return
		}
		if e.Replaced < 1 {
			t.Fatalf("success with %d replacements", e.Replaced)
		}
		if strings.Contains(new, "\r\r") {
			return // a line whose text ends in CR reads back as a CRLF line
		}
		// Line endings follow the file's, so compare with all of them as "\n".
		eols := strings.NewReplacer("\r\n", "\n", "\r", "\n")
		crlf := strings.NewReplacer("\r\n", "\n")
		substring := strings.Contains(crlf.Replace(content), crlf.Replace(old))
		if e.Layer == Exact && substring && !strings.Contains(eols.Replace(e.Content), eols.Replace(strings.TrimPrefix(new, "\uFEFF"))) {
			t.Fatalf("exact replacement lost the new text: %q", e.Content)
		}
		_, _ = ReplaceLines(content, len(old), len(new), new)
	})
}
