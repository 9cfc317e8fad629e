// Package patch edits text the way the build agent asks for it: replace a
// unique snippet (edit_file), replace a line range, or apply a patch in the
// unified diff or the V4A "*** Begin Patch" format (apply_patch).
//
// Snippets and hunks are located in layers: an exact match first, then a
// match that ignores trailing whitespace, then a match of whole lines with
// all whitespace normalised (the replacement is then re-indented to the
// file's indentation). A layer that finds several places is an error that
// names them, never a silent pick of the first. A snippet found nowhere is
// a [*NotFoundError] carrying the nearest window of the file, with
// whitespace made visible, so the model can see what differs.
package patch

import (
	"errors"
	"fmt"
	"strings"
)

// Layer says how a snippet was matched.
type Layer int

// Matching layers, tried in this order.
const (
	Exact Layer = iota + 1
	TrailingWhitespace
	NormalisedWhitespace
)

func (l Layer) String() string {
	switch l {
	case Exact:
		return "exact"
	case TrailingWhitespace:
		return "ignoring trailing whitespace"
	case NormalisedWhitespace:
		return "ignoring indentation and spacing"
	}
	return "unknown"
}

// ErrEmptySnippet reports an empty old_string.
var ErrEmptySnippet = errors.New("the text to replace is empty")

// NotFoundError reports a snippet that matches nowhere in the file.
type NotFoundError struct {
	// Line is the first line (1-based) of the most similar window, 0 when
	// the file is empty.
	Line int
	// Window is that window with line numbers and visible whitespace.
	Window string
	// Similarity of the window to the snippet, 0..1.
	Similarity float64
}

func (e *NotFoundError) Error() string {
	if e.Line == 0 {
		return "the text to replace was not found: the file is empty"
	}
	return fmt.Sprintf("the text to replace was not found (not even ignoring whitespace); the most similar lines (%.0f%% alike) are at line %d:\n%s",
		e.Similarity*100, e.Line, e.Window)
}

// AmbiguousError reports a snippet that matches in several places.
type AmbiguousError struct {
	Lines []int // 1-based first line of each match
	Layer Layer
}

func (e *AmbiguousError) Error() string {
	nums := make([]string, len(e.Lines))
	for i, l := range e.Lines {
		nums[i] = fmt.Sprint(l)
	}
	return fmt.Sprintf("the text to replace matches %d places (%s), at lines %s: include more surrounding lines to make it unique, or set replace_all",
		len(e.Lines), e.Layer, strings.Join(nums, ", "))
}

// RangeError reports a line range outside the file.
type RangeError struct {
	Start, End, Total int
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("line range %d-%d is invalid for a file of %d lines (lines are 1-based, end inclusive; end may be start-1 to insert before start)", e.Start, e.End, e.Total)
}

// text is file content split into lines without their "\n"; eol says
// whether the content ended with a newline.
type text struct {
	lines []string
	eol   bool
}

func split(s string) text {
	if s == "" {
		return text{}
	}
	lines := strings.Split(s, "\n")
	eol := lines[len(lines)-1] == ""
	if eol {
		lines = lines[:len(lines)-1]
	}
	return text{lines: lines, eol: eol}
}

func (t text) String() string {
	s := strings.Join(t.lines, "\n")
	if t.eol && len(t.lines) > 0 {
		s += "\n"
	}
	return s
}

// snippetLines splits a snippet into lines, dropping the empty line after
// a final newline.
func snippetLines(s string) []string {
	lines := strings.Split(s, "\n")
	if len(lines) > 1 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func trimRight(s string) string { return strings.TrimRight(s, " \t\r") }
func normalise(s string) string { return strings.Join(strings.Fields(s), " ") }

// findLines returns the first layer (TrailingWhitespace or
// NormalisedWhitespace) in which block matches whole lines of file at or
// after from, and the 0-based starts of every match in that layer.
func findLines(file, block []string, from int) (Layer, []int) {
	if len(block) == 0 {
		return 0, nil
	}
	for _, layer := range []Layer{Exact, TrailingWhitespace, NormalisedWhitespace} {
		var norm func(string) string
		switch layer {
		case Exact:
			norm = func(s string) string { return s }
		case TrailingWhitespace:
			norm = trimRight
		default:
			norm = normalise
		}
		want := make([]string, len(block))
		for i, b := range block {
			want[i] = norm(b)
		}
		var starts []int
		for i := max(from, 0); i+len(block) <= len(file); i++ {
			ok := true
			for j := range block {
				if norm(file[i+j]) != want[j] {
					ok = false
					break
				}
			}
			if ok {
				starts = append(starts, i)
				i += len(block) - 1 // matches do not overlap
			}
		}
		if len(starts) > 0 {
			return layer, starts
		}
	}
	return 0, nil
}

// indentOf returns the leading whitespace of the first non-blank line.
func indentOf(lines []string) string {
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			return l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		}
	}
	return ""
}

// reindent moves replacement lines written for the indentation of old to
// the indentation of matched: an indentation seen on a line of old becomes
// the indentation of the matching file line; others are shifted like the
// first line.
func reindent(repl, old, matched []string) []string {
	lead := func(l string) string { return l[:len(l)-len(strings.TrimLeft(l, " \t"))] }
	mapped := map[string]string{}
	for j := range old {
		if strings.TrimSpace(old[j]) != "" {
			if _, ok := mapped[lead(old[j])]; !ok {
				mapped[lead(old[j])] = lead(matched[j])
			}
		}
	}
	from, to := indentOf(old), indentOf(matched)
	out := make([]string, len(repl))
	for i, l := range repl {
		ind := lead(l)
		switch {
		case strings.TrimSpace(l) == "":
			out[i] = l
		case mapped[ind] != "" || ind == "":
			out[i] = mapped[ind] + l[len(ind):]
		case strings.HasPrefix(l, from):
			out[i] = to + l[len(from):]
		default:
			out[i] = to + strings.TrimLeft(l, " \t")
		}
	}
	return out
}

// nearest finds the window of file most similar to block.
func nearest(file, block []string) *NotFoundError {
	if len(file) == 0 {
		return &NotFoundError{}
	}
	k := min(len(block), 30, len(file))
	fileGrams := make([]map[string]int, len(file))
	for i, l := range file {
		fileGrams[i] = bigrams(normalise(l))
	}
	blockGrams := make([]map[string]int, k)
	for j := range k {
		blockGrams[j] = bigrams(normalise(block[j]))
	}
	best, bestScore := 0, -1.0
	for i := 0; i+k <= len(file); i++ {
		score := 0.0
		for j := range k {
			score += dice(fileGrams[i+j], blockGrams[j])
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	end := min(best+len(block)+1, len(file))
	start := max(best-1, 0)
	return &NotFoundError{Line: best + 1, Window: Visible(file[start:end], start+1), Similarity: bestScore / float64(k)}
}

func bigrams(s string) map[string]int {
	m := map[string]int{}
	r := []rune(s)
	if len(r) == 1 {
		m[string(r)]++
	}
	for i := 0; i+1 < len(r); i++ {
		m[string(r[i:i+2])]++
	}
	return m
}

func dice(a, b map[string]int) float64 {
	if len(a) == 0 && len(b) == 0 {
		return 1
	}
	na, nb, common := 0, 0, 0
	for g, n := range a {
		na += n
		common += min(n, b[g])
	}
	for _, n := range b {
		nb += n
	}
	if na+nb == 0 {
		return 0
	}
	return 2 * float64(common) / float64(na+nb)
}

// Visible renders lines with 1-based numbers from first, spaces as '·',
// tabs as '→' and the end of each line as '⏎', so whitespace differences
// can be seen.
func Visible(lines []string, first int) string {
	var b strings.Builder
	r := strings.NewReplacer(" ", "·", "\t", "→", "\r", "␍")
	for i, l := range lines {
		fmt.Fprintf(&b, "%5d| %s⏎\n", first+i, r.Replace(l))
	}
	return b.String()
}
