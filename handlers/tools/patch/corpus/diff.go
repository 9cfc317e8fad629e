package corpus

import (
	"fmt"
	"strings"
)

// op is one line of an edit script: '=' kept, '-' removed, '+' added.
type op struct {
	kind byte
	text string // the line with its ending, as in the file
	old  int    // 0-based line in the old file ('=' and '-')
	new  int    // 0-based line in the new file ('=' and '+')
}

// lines splits text after each "\n" as diff does: a last line without a
// newline is a line of its own.
func lines(s string) []string {
	if s == "" {
		return nil
	}
	out := strings.SplitAfter(s, "\n")
	if out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// script computes a shortest edit script from a to b (Myers' algorithm,
// after stripping the common prefix and suffix).
func script(a, b []string) []op {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var out []op
	for i := range pre {
		out = append(out, op{'=', a[i], i, i})
	}
	for _, o := range myers(a[pre:len(a)-suf], b[pre:len(b)-suf]) {
		o.old += pre
		o.new += pre
		out = append(out, o)
	}
	for k := suf; k > 0; k-- {
		i, j := len(a)-k, len(b)-k
		out = append(out, op{'=', a[i], i, j})
	}
	return out
}

func myers(a, b []string) []op {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		var out []op
		for i := range a {
			out = append(out, op{'-', a[i], i, 0})
		}
		for j := range b {
			out = append(out, op{'+', b[j], n, j})
		}
		return out
	}
	total := n + m
	// trace[d] holds V for k in [-d, d], offset by d.
	var trace [][]int
	v := make([]int, 2*total+2)
	get := func(k int) int { return v[k+total] }
	dEnd := 0
outer:
	for d := 0; d <= total; d++ {
		snap := make([]int, 2*d+1)
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || k != d && get(k-1) < get(k+1) {
				x = get(k + 1)
			} else {
				x = get(k-1) + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[k+total] = x
			snap[k+d] = x
			if x >= n && y >= m {
				trace = append(trace, snap)
				dEnd = d
				break outer
			}
		}
		trace = append(trace, snap)
	}
	// Walk back from (n, m).
	var rev []op
	x, y := n, m
	for d := dEnd; d > 0; d-- {
		prev := trace[d-1]
		at := func(k int) int { return prev[k+d-1] }
		k := x - y
		var pk int
		if k == -d || k != d && at(k-1) < at(k+1) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := at(pk)
		py := px - pk
		for x > px && y > py {
			x, y = x-1, y-1
			rev = append(rev, op{'=', a[x], x, y})
		}
		if x == px {
			y--
			rev = append(rev, op{'+', b[y], x, y})
		} else {
			x--
			rev = append(rev, op{'-', a[x], x, y})
		}
	}
	for x > 0 && y > 0 {
		x, y = x-1, y-1
		rev = append(rev, op{'=', a[x], x, y})
	}
	out := make([]op, len(rev))
	for i := range rev {
		out[i] = rev[len(rev)-1-i]
	}
	return out
}

// hunk is a range [from, to) of an edit script.
type hunk struct{ from, to int }

// hunks groups the changes of a script with up to context unchanged lines
// around each; changes closer than twice the context share a hunk, as in
// diff -u.
func hunks(s []op, context int) []hunk {
	var out []hunk
	for i := 0; i < len(s); {
		for i < len(s) && s[i].kind == '=' {
			i++
		}
		if i == len(s) {
			break
		}
		start, end := max(i-context, 0), i
		for {
			for end < len(s) && s[end].kind != '=' {
				end++
			}
			run := end
			for run < len(s) && s[run].kind == '=' {
				run++
			}
			if run < len(s) && run-end <= 2*context {
				end = run
				continue
			}
			end = min(end+context, len(s))
			break
		}
		out = append(out, hunk{start, end})
		i = end
	}
	return out
}

// header returns the 1-based old line a hunk starts at, and its old and new
// line counts, as a unified header gives them.
func header(s []op, h hunk) (oldStart, oldN, newStart, newN int) {
	for _, o := range s[h.from:h.to] {
		if o.kind != '+' {
			oldN++
		}
		if o.kind != '-' {
			newN++
		}
	}
	first := s[h.from]
	oldStart, newStart = first.old+1, first.new+1
	if oldN == 0 {
		oldStart--
	}
	if newN == 0 {
		newStart--
	}
	return
}

func rangeOf(start, n int) string {
	if n == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}
