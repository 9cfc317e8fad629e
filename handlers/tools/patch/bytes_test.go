package patch

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestApplyKeepsBytes checks that a patch changes only the lines it
// changes: line endings, final newline, BOM and the file's own context
// lines stay as they were.
func TestApplyKeepsBytes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		file      string
		patch     string
		want      string
		wantLayer Layer
	}{
		{name: "CRLF", file: "a\r\nb\r\nc\r\n", patch: "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n",
			want: "a\r\nB\r\nc\r\n"},
		{name: "CRLFPatchAgainstCRLF", file: "a\r\nb\r\nc\r\n", patch: "@@ -1,3 +1,4 @@\r\n a\r\n-b\r\n+B\r\n+B2\r\n c\r\n",
			want: "a\r\nB\r\nB2\r\nc\r\n"},
		{name: "CROnly", file: "a\rb\rc\r", patch: "@@\n a\n-b\n+B\n+B2\n c\n", want: "a\rB\rB2\rc\r"},
		{name: "MixedEndingsPerLine", file: "a\r\nb\nc\r\nd\n", patch: "@@\n a\n-b\n-c\n+B\n+C\n+X\n d\n",
			want: "a\r\nB\nC\r\nX\nd\n"},
		{name: "LoneCRInsideLine", file: "x = 'a\rb'\ny\n", patch: "@@\n x = 'a\rb'\n-y\n+z\n", want: "x = 'a\rb'\nz\n"},
		{name: "NoFinalNewlineKept", file: "a\nb", patch: "@@\n a\n-b\n+c\n", want: "a\nc"},
		// Codex's applier ends every file it writes with a newline (CRLF on
		// Windows for an all-CRLF file); this one keeps the file's missing
		// final newline, a byte the edit did not change, as GNU patch does
		// without a "\ No newline" marker in the patch.
		{name: "CRLFNoFinalNewlineKept", file: "a\r\nb\r\nc", patch: "@@\n b\n-c\n+C\n", want: "a\r\nb\r\nC"},
		{name: "CRLFNoFinalNewlineEditAbove", file: "a\r\nb\r\nc", patch: "@@\n a\n-b\n+B\n c\n", want: "a\r\nB\r\nc"},
		// A lone CR in a file with LF or CRLF lines is text, as GNU patch,
		// git and Codex's applier read it (they split at LF only): the line
		// "b\rc" is one line, addressed whole.
		{name: "PartOfIndentationLost", file: "func f() {\n        if x {\n                y()\n        }\n}\n",
			patch: "@@\n     if x {\n-            y()\n+            y()\n+            z()\n     }\n",
			want:  "func f() {\n        if x {\n                y()\n                z()\n        }\n}\n", wantLayer: Indentation},
		{name: "LoneCRAmongLFAndCRLFLines", file: "a\nb\rc\r\nd\n", patch: "@@\n a\n-b\rc\n+B\n d\n", want: "a\nB\r\nd\n"},
		{name: "NoFinalNewlineAppend", file: "a\nb", patch: "@@\n b\n+c\n", want: "a\nb\nc"},
		{name: "MarkerAddsFinalNewline", file: "a\nb", patch: "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n", want: "a\nb\n"},
		{name: "MarkerRemovesFinalNewline", file: "a\nb\n", patch: "@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n", want: "a\nb"},
		{name: "BOM", file: "\uFEFFa\r\nb\r\n", patch: "@@\n-a\n+A\n b\n", want: "\uFEFFA\r\nb\r\n"},
		{name: "ContextFromFileNotPatch", file: "\tif x {  \n\t\ty()\n\t}\n", patch: "@@ -1,3 +1,3 @@\n     if x {\n-        y()\n+\t\tz()\n     }\n",
			want: "\tif x {  \n\t\tz()\n\t}\n", wantLayer: Indentation},
		{name: "TrailingWhitespaceDrift", file: "a  \nb\t\nc\n", patch: "@@\n a\n-b\n+B\n c\n", want: "a  \nB\nc\n", wantLayer: TrailingWhitespace},
		{name: "ReindentToTabs", file: "func f() {\n\tif x {\n\t\ty()\n\t}\n}\n",
			patch: "@@\n     if x {\n-        y()\n+        if z {\n+            w()\n+        }\n     }\n",
			want:  "func f() {\n\tif x {\n\t\tif z {\n\t\t\tw()\n\t\t}\n\t}\n}\n", wantLayer: Indentation},
		{name: "ReindentToTwoSpaces", file: "if (a) {\n  b();\n}\n", patch: "@@\n if (a) {\n-\tb();\n+\tc();\n+\tif (d) {\n+\t\te();\n+\t}\n }\n",
			want: "if (a) {\n  c();\n  if (d) {\n    e();\n  }\n}\n", wantLayer: Indentation},
		{name: "Punctuation", file: "// a - b \"quoted\" it's\nx := 1\n", patch: "@@\n // a \u2013 b \u201cquoted\u201d it\u2019s\n-x := 1\n+x := 2\n",
			want: "// a - b \"quoted\" it's\nx := 2\n", wantLayer: Punctuation},
		{name: "NBSPAndNonBreakingHyphen", file: "a\u00a0b non-breaking\nz\n", patch: "@@\n a b non\u2011breaking\n-z\n+Z\n", want: "a\u00a0b non-breaking\nZ\n", wantLayer: Punctuation},
		{name: "LeadingBlankContextTolerated", file: "x\ny\nz\n", patch: "@@\n \n x\n-y\n+Y\n z\n \n", want: "x\nY\nz\n"},
		{name: "ClosestToLineNumberAfterShift", file: "k\nk\nk\nk\nk\nk\n", patch: "@@ -1,1 +1,2 @@\n k\n+A\n@@ -5,1 +6,2 @@\n k\n+B\n",
			want: "k\nA\nk\nk\nk\nk\nB\nk\n"},
		{name: "DashDashLineInsideCountedHunk", file: "-- a\n++ b\nc\n", patch: "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n--- a\n+++ b\n-++ b\n+++ B\n c\n",
			want: "++ b\n++ B\nc\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := tt.patch
			if !strings.HasPrefix(p, "---") {
				p = "--- a/x\n+++ b/x\n" + p
			}
			ops, err := Parse(p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Apply("x", tt.file, ops[0].Hunks)
			if err != nil {
				t.Fatal(err)
			}
			if got.Content != tt.want {
				t.Fatalf("got  %q\nwant %q", got.Content, tt.want)
			}
			layer := tt.wantLayer
			if layer == 0 {
				layer = Exact
			}
			if got.Hunks[0].Layer != layer {
				t.Fatalf("layer = %s, want %s", got.Hunks[0].Layer, layer)
			}
		})
	}
}

func TestReplaceKeepsBytes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		file, old, nw string
		all           bool
		want          string
	}{
		{name: "CRLFMultiLine", file: "a\r\nb\r\nc\r\n", old: "a\nb\n", nw: "x\ny\nz\n", want: "x\r\ny\r\nz\r\nc\r\n"},
		{name: "CRLFInLine", file: "one two\r\nthree\r\n", old: "two", nw: "2\nand more", want: "one 2\r\nand more\r\nthree\r\n"},
		{name: "CRLFOldGivenInCRLF", file: "a\r\nb\r\n", old: "a\r\nb", nw: "c", want: "c\r\n"},
		{name: "MixedEndings", file: "a\nb\r\nc\n", old: "b\nc", nw: "B\nC", want: "a\nB\r\nC\n"},
		{name: "CROnly", file: "a\rb\rc", old: "b\nc", nw: "B\nC", want: "a\rB\rC"},
		{name: "FinalNewlineRemovedWhenAsked", file: "a\nb\n", old: "b\n", nw: "c", want: "a\nc"},
		{name: "NoFinalNewlineKept", file: "a\nb", old: "b", nw: "c\nd", want: "a\nc\nd"},
		{name: "BOM", file: "\uFEFFa\nb\n", old: "a", nw: "A", want: "\uFEFFA\nb\n"},
		{name: "LeadingBlankLineFileLacks", file: "x\nfoo()\ny\n", old: "\n\nfoo()\n", nw: "\n\nbar()\n", want: "x\nbar()\ny\n"},
		{name: "TabsStayTabs", file: "\tif a {\n\t\tb()\n\t}\n", old: "if a {\n    b()\n}", nw: "if a {\n    b()\n    c()\n}", want: "\tif a {\n\t\tb()\n\t\tc()\n\t}\n"},
		{name: "CurlyQuotes", file: "say(\"hello\")\n", old: "say(\u201chello\u201d)", nw: "say(\"hi\")", want: "say(\"hi\")\n"},
		{name: "ReplaceAllCRLF", file: "x\r\ny\r\nx\r\n", old: "x", nw: "z", all: true, want: "z\r\ny\r\nz\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Replace(tt.file, tt.old, tt.nw, tt.all)
			if err != nil {
				t.Fatal(err)
			}
			if got.Content != tt.want {
				t.Fatalf("got  %q\nwant %q", got.Content, tt.want)
			}
		})
	}
}

func TestReplaceLinesKeepsEndings(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file       string
		start, end int
		nw, want   string
	}{
		{"a\r\nb\r\nc\r\n", 2, 2, "x\ny\n", "a\r\nx\r\ny\r\nc\r\n"},
		{"a\nb", 2, 2, "x", "a\nx"},
		{"a\nb", 3, 2, "c", "a\nb\nc"},
		{"", 1, 0, "a", "a\n"},
		{"a\r\n", 1, 0, "z", "z\r\na\r\n"},
	} {
		got, err := ReplaceLines(tt.file, tt.start, tt.end, tt.nw)
		if err != nil || got != tt.want {
			t.Errorf("ReplaceLines(%q, %d, %d, %q) = %q, %v; want %q", tt.file, tt.start, tt.end, tt.nw, got, err, tt.want)
		}
	}
}

func TestV4AAsModelsWriteIt(t *testing.T) {
	t.Parallel()
	file := "class A {\n  run() {\n    return 1\n  }\n}\nclass B {\n  run() {\n    return 1\n  }\n}\n"
	p := "  *** Begin Patch\n  *** Update File: src/x.ts\n@@ class B {\n@@   run() {\n-    return 1\n+    return 2\n  *** End Patch\n"
	ops, err := Parse(p)
	if err != nil {
		t.Fatal(err)
	}
	if ops[0].Path != "src/x.ts" || len(ops[0].Hunks[0].Anchors) != 2 {
		t.Fatalf("ops = %+v", ops)
	}
	got, err := ApplyHunks("src/x.ts", file, ops[0].Hunks)
	if want := "class A {\n  run() {\n    return 1\n  }\n}\nclass B {\n  run() {\n    return 2\n  }\n}\n"; err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
	// *** End of File picks the match at the end.
	ops, err = Parse("*** Begin Patch\n*** Update File: x\n-    return 1\n+    return 3\n   }\n }\n*** End of File\n*** End Patch")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ApplyHunks("x", file, ops[0].Hunks); err != nil || !strings.HasSuffix(got, "return 3\n  }\n}\n") || !strings.Contains(got, "return 1") {
		t.Fatalf("end of file: %q, %v", got, err)
	}
}

func TestAmbiguousHunkNamesTheCandidates(t *testing.T) {
	t.Parallel()
	ops, err := Parse("--- a/x\n+++ b/x\n@@\n a\n-b\n+c\n")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ApplyHunks("x", "a\nb\nz\na\nb\n", ops[0].Hunks)
	var amb *AmbiguousError
	if !errors.As(err, &amb) || len(amb.Lines) != 2 || amb.Lines[0] != 1 || amb.Lines[1] != 4 {
		t.Fatalf("err = %v", err)
	}
	if _, err := Replace("x\nx\n", "x", "y", false); !errors.As(err, &amb) || len(amb.Lines) != 2 || amb.Lines[1] != 2 {
		t.Fatalf("err = %v", err)
	}
}

// FuzzApplyKeepsBytes builds a unified diff that replaces some lines of
// arbitrary content (any mix of line endings, BOM, final newline or not)
// and checks that applying it leaves every other line byte for byte.
func FuzzApplyKeepsBytes(f *testing.F) {
	f.Add("a\r\nb\nc\rd\r\n", uint8(1), uint8(1), "x\ny")
	f.Add("\uFEFFone\r\ntwo\r\nthree", uint8(2), uint8(1), "")
	f.Add("a\rb\rc\r", uint8(0), uint8(2), "z")
	f.Add("", uint8(0), uint8(0), "new")
	f.Fuzz(func(t *testing.T, content string, at, n uint8, repl string) {
		d := parseDoc(content)
		if strings.Contains(strings.TrimPrefix(content, bom), bom) {
			return // a mark inside the text could become the first bytes
		}
		if strings.Contains(content, "\r\r\n") || strings.HasSuffix(content, "\r") && strings.Contains(content, "\n") {
			// A line whose text ends in CR reads, in a diff, like a CRLF line.
			return
		}
		a := int(at) % (len(d.lines) + 1)
		b := a + int(n)%(len(d.lines)-a+1)
		var bodies []string
		if repl != "" {
			for _, l := range strings.Split(repl, "\n") {
				// A CR in an added line could turn the file into a CR-only one.
				bodies = append(bodies, strings.ReplaceAll(l, "\r", ""))
			}
		}
		if b == len(d.lines) && len(bodies) > 0 && bodies[len(bodies)-1] == "" && !d.endsWithEOL() {
			return // an empty last line without a newline is no line at all
		}
		c0, c1 := max(a-3, 0), min(b+3, len(d.lines))
		var p strings.Builder
		p.WriteString("--- a/f\n+++ b/f\n")
		fmt.Fprintf(&p, "@@ -%d,%d +%d,%d @@\n", c0+1, c1-c0, c0+1, c1-c0-(b-a)+len(bodies))
		for i := c0; i < a; i++ {
			p.WriteString(" " + d.lines[i].body + "\n")
		}
		for i := a; i < b; i++ {
			p.WriteString("-" + d.lines[i].body + "\n")
		}
		for _, l := range bodies {
			p.WriteString("+" + l + "\n")
		}
		for i := b; i < c1; i++ {
			p.WriteString(" " + d.lines[i].body + "\n")
		}
		ops, err := Parse(p.String())
		if err != nil || len(ops) != 1 || ops[0].Kind != Update {
			return // e.g. nothing to change
		}
		got, err := ApplyHunks("f", content, ops[0].Hunks)
		if err != nil {
			return // an empty hunk, or the old text no longer identifies the place
		}
		if strings.Contains(got, "\r") && strings.Contains(content, "\n") != strings.Contains(got, "\n") {
			return // the last "\n" went: the file now reads as CR-only
		}
		out := parseDoc(got)
		if out.bom != d.bom {
			t.Fatalf("BOM changed: %q → %q", content, got)
		}
		tail := len(d.lines) - b
		if len(out.lines) != a+len(bodies)+tail {
			t.Fatalf("%d lines, want %d: %q → %q", len(out.lines), a+len(bodies)+tail, content, got)
		}
		for i := range a {
			if out.lines[i] != d.lines[i] && !(i == a-1 && d.lines[i].eol == "") {
				t.Fatalf("line %d changed: %q → %q", i+1, d.lines[i], out.lines[i])
			}
		}
		for i := range tail {
			if out.lines[a+len(bodies)+i] != d.lines[b+i] {
				t.Fatalf("line %d changed: %q → %q", b+i+1, d.lines[b+i], out.lines[a+len(bodies)+i])
			}
		}
		for i, body := range bodies {
			if out.lines[a+i].body != body {
				t.Fatalf("added line %d = %q, want %q", i+1, out.lines[a+i].body, body)
			}
		}
	})
}
