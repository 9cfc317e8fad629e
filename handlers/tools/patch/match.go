// Package patch edits text the way the build agent asks for it: replace a
// unique snippet (edit_file), replace a line range, or apply a patch in the
// unified diff or the V4A "*** Begin Patch" format (apply_patch).
//
// An edit changes only what it changes. Files are handled as lines that
// keep their own endings (LF, CRLF, CR, mixed), a byte order mark and the
// presence or absence of a final newline; every line an edit does not
// replace is written back byte for byte, including a hunk's context lines,
// which are taken from the file and never from the patch.
//
// Snippets and hunks are located in layers, each more tolerant than the
// one before: exact, ignoring trailing whitespace, ignoring indentation,
// ignoring all spacing, and with typographic punctuation (dashes, curly
// quotes, non-breaking spaces) read as ASCII. Blank lines at the start or
// end of the text to replace that the file lacks there are tolerated. When
// a match ignored indentation, the replacement is re-indented to the
// file's style (tabs stay tabs). A layer that finds several places is an
// error that names them, never a silent pick of the first. A snippet found
// nowhere is a [*NotFoundError] carrying the nearest window of the file,
// with whitespace made visible, so the model can see what differs.
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
	Indentation
	NormalisedWhitespace
	Punctuation
)

func (l Layer) String() string {
	switch l {
	case Exact:
		return "exact"
	case TrailingWhitespace:
		return "ignoring trailing whitespace"
	case Indentation:
		return "ignoring indentation"
	case NormalisedWhitespace:
		return "ignoring indentation and spacing"
	case Punctuation:
		return "ignoring whitespace and Unicode punctuation"
	}
	return "unknown"
}

// reindents reports whether a match in this layer may have found the text
// at another indentation.
func (l Layer) reindents() bool { return l >= Indentation }

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
	return fmt.Sprintf("the text to replace was not found (not even ignoring whitespace and punctuation); the most similar lines (%.0f%% alike) are at line %d:\n%s",
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
	return fmt.Sprintf("the text to replace matches %d places (%s), at lines %s: include more surrounding lines to make it unique",
		len(e.Lines), e.Layer, strings.Join(nums, ", "))
}

// RangeError reports a line range outside the file.
type RangeError struct {
	Start, End, Total int
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("line range %d-%d is invalid for a file of %d lines (lines are 1-based, end inclusive; end may be start-1 to insert before start)", e.Start, e.End, e.Total)
}

func trimRight(s string) string { return strings.TrimRight(s, " \t\r") }

// normalise collapses all whitespace runs to one space and trims the ends.
func normalise(s string) string { return strings.Join(strings.Fields(s), " ") }

// punctuation maps the typographic characters models write for ASCII ones
// (dashes, quotes, spaces) to the ASCII character.
var punctuation = strings.NewReplacer(
	"\u2010", "-", "\u2011", "-", "\u2012", "-", "\u2013", "-", "\u2014", "-", "\u2015", "-", "\u2212", "-",
	"\u2018", "'", "\u2019", "'", "\u201A", "'", "\u201B", "'", "\u2032", "'",
	"\u201C", `"`, "\u201D", `"`, "\u201E", `"`, "\u201F", `"`, "\u2033", `"`,
	"\u00A0", " ", "\u2002", " ", "\u2003", " ", "\u2004", " ", "\u2005", " ", "\u2006", " ",
	"\u2007", " ", "\u2008", " ", "\u2009", " ", "\u200A", " ", "\u202F", " ", "\u205F", " ", "\u3000", " ",
	"\u2026", "...",
)

func (l Layer) normaliser() func(string) string {
	switch l {
	case TrailingWhitespace:
		return trimRight
	case Indentation:
		return strings.TrimSpace
	case NormalisedWhitespace:
		return normalise
	case Punctuation:
		return func(s string) string { return normalise(punctuation.Replace(s)) }
	}
	return func(s string) string { return s }
}

// layers are tried in order; each accepts everything the one before does.
var layers = []Layer{Exact, TrailingWhitespace, Indentation, NormalisedWhitespace, Punctuation}

// finder locates blocks of lines in a file, layer by layer, normalising
// the file's lines once per layer.
type finder struct {
	file []string
	norm map[Layer][]string
}

func newFinder(file []string) *finder { return &finder{file: file, norm: map[Layer][]string{}} }

func (f *finder) lines(l Layer) []string {
	if l == Exact {
		return f.file
	}
	if n, ok := f.norm[l]; ok {
		return n
	}
	fn := l.normaliser()
	n := make([]string, len(f.file))
	for i, s := range f.file {
		n[i] = fn(s)
	}
	f.norm[l] = n
	return n
}

// find returns the first layer in which block matches whole lines of the
// file at or after from, and every (possibly overlapping) 0-based start of
// a match in that layer.
func (f *finder) find(block []string, from int) (Layer, []int) {
	if len(block) == 0 {
		return 0, nil
	}
	for _, layer := range layers {
		fn := layer.normaliser()
		want := make([]string, len(block))
		for i, b := range block {
			want[i] = fn(b)
		}
		file := f.lines(layer)
		var starts []int
		for i := max(from, 0); i+len(block) <= len(file); i++ {
			if file[i] != want[0] {
				continue
			}
			ok := true
			for j := 1; j < len(block); j++ {
				if file[i+j] != want[j] {
					ok = false
					break
				}
			}
			if ok {
				starts = append(starts, i)
			}
		}
		if len(starts) > 0 {
			return layer, starts
		}
	}
	return 0, nil
}

// disjoint keeps the starts whose blocks of n lines do not overlap an
// earlier one.
func disjoint(starts []int, n int) []int {
	var out []int
	next := 0
	for _, s := range starts {
		if s >= next {
			out = append(out, s)
			next = s + max(n, 1)
		}
	}
	return out
}

func blank(s string) bool { return strings.TrimSpace(s) == "" }

// trimBlank returns how many blank lines block starts and ends with; both
// are 0 when block is all blank.
func trimBlank(block []string) (lead, trail int) {
	for lead < len(block) && blank(block[lead]) {
		lead++
	}
	if lead == len(block) {
		return 0, 0
	}
	for trail < len(block)-lead && blank(block[len(block)-1-trail]) {
		trail++
	}
	return lead, trail
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
