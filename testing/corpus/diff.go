package corpus

import (
	"fmt"

	"github.com/agentworker/agentworker/handlers/tools/patch"
)

// op is one line of an edit script (patch.LineDiff: the same diff the
// console shows).
type op = patch.LineEdit

// lines splits text after each "\n" as diff does.
func lines(s string) []string { return patch.SplitLines(s) }

// script is the shortest edit script from a to b.
func script(a, b []string) []op { return patch.LineDiff(a, b) }

// hunk is a range [from, to) of an edit script.
type hunk struct{ from, to int }

// hunks groups the changes of a script with up to context unchanged lines
// around each; changes closer than twice the context share a hunk, as in
// diff -u.
func hunks(s []op, context int) []hunk {
	var out []hunk
	for i := 0; i < len(s); {
		for i < len(s) && s[i].Op == ' ' {
			i++
		}
		if i == len(s) {
			break
		}
		start, end := max(i-context, 0), i
		for {
			for end < len(s) && s[end].Op != ' ' {
				end++
			}
			run := end
			for run < len(s) && s[run].Op == ' ' {
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
		if o.Op != '+' {
			oldN++
		}
		if o.Op != '-' {
			newN++
		}
	}
	first := s[h.from]
	oldStart, newStart = first.Old+1, first.New+1
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
