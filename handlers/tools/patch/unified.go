package patch

import (
	"fmt"
	"strings"
)

// ContextLines is the number of unchanged lines Unified shows around a
// change, as diff -u does.
const ContextLines = 3

// maxEdits bounds the Myers search: two versions further apart than this
// many inserted plus deleted lines (after their common head and tail) are
// shown as all old lines removed and all new lines added. It keeps memory
// (about maxEdits² ints) and time bounded on rewrites of big files.
const maxEdits = 1000

// Unified returns the unified diff (diff -u, three lines of context) that
// turns before into after: "--- a/oldPath" / "+++ b/newPath" headers, with
// /dev/null for the missing side when created or deleted is set, then
// hunks. A side that does not end in a newline gets "\ No newline at end of
// file". Two equal texts of the same path give "".
func Unified(oldPath, newPath, before, after string, created, deleted bool) string {
	if before == after && oldPath == newPath && !created && !deleted {
		return ""
	}
	from, to := "a/"+oldPath, "b/"+newPath
	if created {
		from = "/dev/null"
	}
	if deleted {
		to = "/dev/null"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "--- %s\n+++ %s\n", from, to)
	writeHunks(&b, lineDiff(splitLines(before), splitLines(after)))
	return b.String()
}

// edit is one line of an edit script: op is ' ' (kept), '-' or '+'; text
// keeps its "\n", so a last line without one differs from the same line
// with one, as diff -u sees it.
type edit struct {
	op   byte
	text string
}

// LineEdit is one line of an edit script as LineDiff returns it: Op is ' '
// (kept), '-' (removed) or '+' (added); Text keeps its line ending; Old and
// New are the 0-based lines of the old and the new text where it stands.
type LineEdit struct {
	Op       byte
	Text     string
	Old, New int
}

// LineDiff is the edit script Unified shows, turning lines a into b (as
// SplitLines gives them): Myers' shortest one, within maxEdits.
func LineDiff(a, b []string) []LineEdit {
	script := lineDiff(a, b)
	out := make([]LineEdit, len(script))
	i, j := 0, 0
	for k, e := range script {
		out[k] = LineEdit{Op: e.op, Text: e.text, Old: i, New: j}
		switch e.op {
		case ' ':
			i, j = i+1, j+1
		case '-':
			i++
		case '+':
			j++
		}
	}
	return out
}

// SplitLines splits text into lines, each with its "\n" (the last may lack
// it); "" has none.
func SplitLines(s string) []string { return splitLines(s) }

// splitLines splits text into lines, each with its "\n" (the last may lack
// it); "" has none.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// lineDiff is an edit script from a to b: Myers' shortest one, within
// maxEdits; beyond that, a delete-all, insert-all script.
func lineDiff(a, b []string) []edit {
	head := 0
	for head < len(a) && head < len(b) && a[head] == b[head] {
		head++
	}
	tail := 0
	for tail < len(a)-head && tail < len(b)-head && a[len(a)-1-tail] == b[len(b)-1-tail] {
		tail++
	}
	var script []edit
	for _, l := range a[:head] {
		script = append(script, edit{' ', l})
	}
	mid, ok := myers(a[head:len(a)-tail], b[head:len(b)-tail])
	if !ok {
		mid = mid[:0]
		for _, l := range a[head : len(a)-tail] {
			mid = append(mid, edit{'-', l})
		}
		for _, l := range b[head : len(b)-tail] {
			mid = append(mid, edit{'+', l})
		}
	}
	script = append(script, mid...)
	for _, l := range a[len(a)-tail:] {
		script = append(script, edit{' ', l})
	}
	return script
}

// myers finds a shortest edit script from a to b (E. Myers, "An O(ND)
// Difference Algorithm and Its Variations", 1986); ok is false when it
// needs more than maxEdits edits.
func myers(a, b []string) (script []edit, ok bool) {
	n, m := len(a), len(b)
	limit := min(n+m, maxEdits)
	off := limit + 1
	v := make([]int, 2*limit+3)
	// trace[d] is the window v[off-d-1 : off+d+2] before round d.
	var trace [][]int
	for d := 0; d <= limit; d++ {
		trace = append(trace, append([]int(nil), v[off-d-1:off+d+2]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1] // down: insert b[y]
			} else {
				x = v[off+k-1] + 1 // right: delete a[x]
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[off+k] = x
			if x >= n && y >= m {
				return backtrack(a, b, trace), true
			}
		}
	}
	return nil, false
}

// backtrack walks trace from the end to the start and returns the script.
func backtrack(a, b []string, trace [][]int) []edit {
	var rev []edit
	x, y := len(a), len(b)
	for d := len(trace) - 1; d >= 0; d-- {
		w := trace[d]
		at := func(k int) int { return w[k+d+1] }
		k := x - y
		var pk int
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := 0
		if d > 0 {
			px = at(pk)
		}
		py := px - pk
		for x > px && y > py {
			rev = append(rev, edit{' ', a[x-1]})
			x, y = x-1, y-1
		}
		if d > 0 {
			if x == px {
				rev = append(rev, edit{'+', b[py]})
			} else {
				rev = append(rev, edit{'-', a[px]})
			}
		}
		x, y = px, py
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// writeHunks writes the script's changes as hunks with ContextLines of
// context, merging changes whose contexts touch.
func writeHunks(b *strings.Builder, script []edit) {
	for i := 0; i < len(script); {
		if script[i].op == ' ' {
			i++
			continue
		}
		// A hunk: from ContextLines before this change to ContextLines
		// after the last change at most 2*ContextLines from the one
		// before it.
		start := max(0, i-ContextLines)
		end := i
		for j := i; j < len(script) && j-end <= 2*ContextLines; j++ {
			if script[j].op != ' ' {
				end = j + 1
			}
		}
		end = min(len(script), end+ContextLines)
		oldStart, newStart := count(script[:start])
		oldCount, newCount := count(script[start:end])
		fmt.Fprintf(b, "@@ -%s +%s @@\n", hunkRange(oldStart, oldCount), hunkRange(newStart, newCount))
		for _, e := range script[start:end] {
			b.WriteByte(e.op)
			b.WriteString(e.text)
			if !strings.HasSuffix(e.text, "\n") {
				b.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = end
	}
}

// count returns how many lines of the old and the new text script covers.
func count(script []edit) (old, new int) {
	for _, e := range script {
		if e.op != '+' {
			old++
		}
		if e.op != '-' {
			new++
		}
	}
	return old, new
}

// hunkRange renders a hunk side as diff -u does: "l,n", "l" for one line,
// and "l-1,0" (the line before) for none.
func hunkRange(start, count int) string {
	switch count {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, count)
}
