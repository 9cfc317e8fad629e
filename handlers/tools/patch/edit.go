package patch

import (
	"strings"
)

// Edit is the outcome of a successful replacement.
type Edit struct {
	Content  string
	Layer    Layer
	Replaced int // number of places replaced
	Line     int // 1-based first line of the first replacement
	// BlankLines is set when blank lines at the start or end of old, which
	// the file lacks there, were left out to find it.
	BlankLines bool
}

// Replace replaces old with new in content. Without replaceAll, old must
// match exactly one place (in the first layer that matches anywhere).
// Line endings in old and new do not matter: the file keeps its own, and
// new lines take those of the lines they replace.
func Replace(content, old, new string, replaceAll bool) (Edit, error) {
	if old == "" {
		return Edit{}, ErrEmptySnippet
	}
	d := parseDoc(content)
	if e, ok, err := replaceExact(d, old, new, replaceAll); ok || err != nil {
		return e, err
	}
	block := snippetLines(old)
	repl := snippetLines(new)
	f := newFinder(d.bodies())
	layer, starts := f.find(block, 0)
	trimmed := false
	if len(starts) == 0 {
		// Blank lines around the text that the file lacks there.
		if lead, trail := trimBlank(block); lead+trail > 0 {
			block = block[lead : len(block)-trail]
			repl = trimBlankN(repl, lead, trail)
			layer, starts = f.find(block, 0)
			trimmed = true
		}
	}
	if len(starts) == 0 {
		return Edit{}, nearest(d.bodies(), snippetLines(old))
	}
	starts = disjoint(starts, len(block))
	if len(starts) > 1 && !replaceAll {
		return Edit{}, &AmbiguousError{Lines: plusOne(starts), Layer: layer}
	}
	for i := len(starts) - 1; i >= 0; i-- {
		s := starts[i]
		r := repl
		if layer.reindents() {
			r = reindent(repl, block, d.bodies()[s:s+len(block)])
		}
		d = d.splice(s, s+len(block), r)
	}
	return Edit{Content: d.String(), Layer: layer, Replaced: len(starts), Line: starts[0] + 1, BlankLines: trimmed}, nil
}

// trimBlankN drops up to lead leading and trail trailing blank lines.
func trimBlankN(lines []string, lead, trail int) []string {
	for lead > 0 && len(lines) > 0 && blank(lines[0]) {
		lines, lead = lines[1:], lead-1
	}
	for trail > 0 && len(lines) > 0 && blank(lines[len(lines)-1]) {
		lines, trail = lines[:len(lines)-1], trail-1
	}
	return lines
}

// replaceExact replaces old as a substring of the file's text with its
// line endings read as "\n". ok is false when old does not occur.
func replaceExact(d doc, old, new string, replaceAll bool) (Edit, bool, error) {
	text, starts := d.joined()
	old, new = lf(old), lf(new)
	var at []int
	for off := 0; ; {
		i := strings.Index(text[off:], old)
		if i < 0 {
			break
		}
		at = append(at, off+i)
		off += i + len(old)
	}
	if len(at) == 0 {
		return Edit{}, false, nil
	}
	lineOf := func(off int) (int, int) {
		// The last line starting at or before off.
		lo, hi := 0, len(starts)-1
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if starts[mid] <= off {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		return lo, off - starts[lo]
	}
	lines := make([]int, len(at))
	for i, a := range at {
		lines[i], _ = lineOf(a)
		lines[i]++
	}
	if len(at) > 1 && !replaceAll {
		return Edit{}, true, &AmbiguousError{Lines: lines, Layer: Exact}
	}
	// A virtual empty line after a final newline lets a match end there.
	src := d.lines
	if d.endsWithEOL() || len(d.lines) == 0 {
		src = append(append([]line{}, d.lines...), line{})
	}
	def := d.eol()
	parts := strings.Split(new, "\n")
	out := make([]line, 0, len(src))
	pending := ""
	cur, col := 0, 0
	for _, a := range at {
		la, ca := lineOf(a)
		lb, cb := lineOf(a + len(old))
		if la == cur {
			pending += src[cur].body[col:ca]
		} else {
			out = append(out, line{body: pending + src[cur].body[col:], eol: src[cur].eol})
			out = append(out, src[cur+1:la]...)
			pending = src[la].body[:ca]
		}
		// The replacement's line breaks take the endings of those it
		// replaces, then of the line it ends in.
		for j, part := range parts {
			pending += part
			if j == len(parts)-1 {
				break
			}
			eol := src[lb].eol
			if m := lb - la; m > 0 {
				eol = src[la+min(j, m-1)].eol
			}
			if eol == "" {
				eol = def
			}
			out = append(out, line{body: pending, eol: eol})
			pending = ""
		}
		cur, col = lb, cb
	}
	out = append(out, line{body: pending + src[cur].body[col:], eol: src[cur].eol})
	out = append(out, src[cur+1:]...)
	if n := len(out); n > 0 && out[n-1] == (line{}) {
		out = out[:n-1]
	}
	for i := range out[:max(len(out)-1, 0)] {
		if out[i].eol == "" {
			out[i].eol = def
		}
	}
	return Edit{Content: doc{bom: d.bom, lines: out}.String(), Layer: Exact, Replaced: len(at), Line: lines[0]}, true, nil
}

// joined returns the file's text with every line ending as "\n", and the
// offset of each line in it (plus one past the end, for the virtual line
// after a final newline).
func (d doc) joined() (string, []int) {
	var b strings.Builder
	starts := make([]int, 0, len(d.lines)+1)
	for _, l := range d.lines {
		starts = append(starts, b.Len())
		b.WriteString(l.body)
		if l.eol != "" {
			b.WriteByte('\n')
		}
	}
	if d.endsWithEOL() || len(d.lines) == 0 {
		starts = append(starts, b.Len())
	}
	return b.String(), starts
}

// lf reads a snippet's line endings as "\n" (CR-only text included).
func lf(s string) string {
	s = strings.TrimPrefix(s, bom)
	if strings.Contains(s, "\n") {
		return strings.ReplaceAll(s, "\r\n", "\n")
	}
	return strings.ReplaceAll(s, "\r", "\n")
}

// ReplaceLines replaces lines start..end (1-based, inclusive) with new.
// end = start-1 inserts new before line start; start = total+1 appends.
func ReplaceLines(content string, start, end int, new string) (string, error) {
	d := parseDoc(content)
	total := len(d.lines)
	if start < 1 || start > total+1 || end < start-1 || end > total {
		return "", &RangeError{Start: start, End: end, Total: total}
	}
	return d.splice(start-1, end, snippetLines(new)).String(), nil
}

func plusOne(starts []int) []int {
	out := make([]int, len(starts))
	for i, s := range starts {
		out[i] = s + 1
	}
	return out
}
