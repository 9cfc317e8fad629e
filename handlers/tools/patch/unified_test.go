package patch_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/handlers/tools/patch"
)

func TestUnified(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		before, after    string
		created, deleted bool
		want             string
	}{
		{name: "Equal", before: "a\n", after: "a\n", want: ""},
		{name: "Created", after: "one\ntwo\n", created: true,
			want: "--- /dev/null\n+++ b/f.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n"},
		{name: "Deleted", before: "one\n", deleted: true,
			want: "--- a/f.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-one\n"},
		{name: "ChangedLine", before: "a\nb\nc\n", after: "a\nB\nc\n",
			want: "--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
		{name: "NoFinalNewline", before: "a\nb", after: "a\nb\n",
			want: "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"},
		{name: "TwoHunks", before: lines(1, 20), after: strings.Replace(strings.Replace(lines(1, 20), "L2\n", "X\n", 1), "L19\n", "Y\n", 1),
			want: "--- a/f.txt\n+++ b/f.txt\n@@ -1,5 +1,5 @@\n L1\n-L2\n+X\n L3\n L4\n L5\n@@ -16,5 +16,5 @@\n L16\n L17\n L18\n-L19\n+Y\n L20\n"},
		{name: "MergedWhenContextsTouch", before: lines(1, 12), after: strings.Replace(strings.Replace(lines(1, 12), "L2\n", "X\n", 1), "L9\n", "Y\n", 1),
			want: "--- a/f.txt\n+++ b/f.txt\n@@ -1,12 +1,12 @@\n L1\n-L2\n+X\n L3\n L4\n L5\n L6\n L7\n L8\n-L9\n+Y\n L10\n L11\n L12\n"},
		{name: "Insertion", before: "a\nc\n", after: "a\nb\nc\n",
			want: "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,3 @@\n a\n+b\n c\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := patch.Unified("f.txt", "f.txt", tt.before, tt.after, tt.created, tt.deleted); got != tt.want {
				t.Errorf("Unified =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "L%d\n", i)
	}
	return b.String()
}

// TestUnifiedRoundTrip applies each diff with the patch tool's own parser
// and applier: the result is the new text.
func TestUnifiedRoundTrip(t *testing.T) {
	t.Parallel()
	base := lines(1, 60)
	for i, after := range []string{
		strings.Replace(base, "L30\n", "", 1),
		strings.Replace(base, "L1\n", "L0\nL1\n", 1) + "L61\n",
		strings.NewReplacer("L5\n", "five\n", "L6\n", "", "L40\n", "forty\nforty-one\n").Replace(base),
		"completely\ndifferent\n",
		lines(31, 60) + lines(1, 30),
	} {
		diff := patch.Unified("f.txt", "f.txt", base, after, false, false)
		ops, err := patch.Parse(diff)
		if err != nil || len(ops) != 1 {
			t.Fatalf("case %d: Parse = %v, %v\n%s", i, ops, err, diff)
		}
		got, err := patch.ApplyHunks("f.txt", base, ops[0].Hunks)
		if err != nil || got != after {
			t.Errorf("case %d: applied = %q, %v; want %q\n%s", i, got, err, after, diff)
		}
	}
}

// FuzzUnified applies each diff strictly by its line numbers (no
// matching): the hunks must rebuild the new text from the old exactly.
func FuzzUnified(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nc\nd\n")
	f.Add("", "x\n")
	f.Add("x\ny", "x\ny\n")
	f.Add(lines(1, 30), strings.Replace(lines(1, 30), "L15\n", "", 1))
	f.Fuzz(func(t *testing.T, before, after string) {
		diff := patch.Unified("f", "f", before, after, false, false)
		if before == after {
			if diff != "" {
				t.Fatalf("diff of equal texts:\n%s", diff)
			}
			return
		}
		if got := applyStrict(t, before, diff); got != after {
			t.Fatalf("applied = %q, want %q\n%s", got, after, diff)
		}
	})
}

// applyStrict applies a diff of Unified by its hunk headers' line numbers.
func applyStrict(t *testing.T, before, diff string) string {
	t.Helper()
	old := strings.SplitAfter(before, "\n")
	var out []string
	at := 0       // old lines consumed
	lastOut := -1 // index in out of the line a "\ No newline" marker refers to
	for _, l := range strings.SplitAfter(diff, "\n")[2:] {
		switch {
		case l == "":
		case strings.HasPrefix(l, "@@ -"):
			spec := strings.Fields(l)[1][1:]
			startText, countText, hasCount := strings.Cut(spec, ",")
			var start, n int
			if _, err := fmt.Sscan(startText, &start); err != nil {
				t.Fatalf("hunk header %q: %v", l, err)
			}
			n = 1
			if hasCount {
				if _, err := fmt.Sscan(countText, &n); err != nil {
					t.Fatalf("hunk header %q: %v", l, err)
				}
			}
			if n > 0 {
				start--
			}
			for ; at < start; at++ {
				out = append(out, old[at])
			}
		case l == "\\ No newline at end of file\n":
			if lastOut >= 0 {
				out[lastOut] = strings.TrimSuffix(out[lastOut], "\n")
			}
		default:
			text := l[1:]
			if l[0] != '+' {
				if at >= len(old) || strings.TrimSuffix(old[at], "\n") != strings.TrimSuffix(text, "\n") {
					t.Fatalf("old line %d is not %q:\n%s", at+1, text, diff)
				}
				at++
			}
			lastOut = -1
			if l[0] != '-' {
				out = append(out, text)
				lastOut = len(out) - 1
			}
		}
	}
	return strings.Join(append(out, old[at:]...), "")
}

// TestUnifiedRewrite: versions too far apart for the bounded search are
// shown as every old line removed and every new line added.
func TestUnifiedRewrite(t *testing.T) {
	t.Parallel()
	before, after := lines(1, 1200), lines(2001, 3200)
	diff := patch.Unified("f", "f", before, after, false, false)
	if got := applyStrict(t, before, diff); got != after {
		t.Fatalf("applied the rewrite wrongly")
	}
	if !strings.HasPrefix(diff, "--- a/f\n+++ b/f\n@@ -1,1200 +1,1200 @@\n-L1\n") {
		t.Errorf("rewrite diff starts %q", diff[:60])
	}
}
