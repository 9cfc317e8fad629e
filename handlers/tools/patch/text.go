package patch

import "strings"

// line is one line of a file: its text and its own line ending ("\n",
// "\r\n", "\r", or "" for a last line without one). Edits replace bodies;
// every line they do not change is written back with its own bytes.
type line struct {
	body string
	eol  string
}

// doc is file content as lines that keep their endings, plus a byte order
// mark that is not part of the first line.
type doc struct {
	bom   string
	lines []line
}

const bom = "\uFEFF"

// parseDoc splits content into lines. A file with any "\n" is split on it
// (a "\r" before it makes that line CRLF; a lone "\r" elsewhere is text, as
// diff and git see it); a file with "\r" but no "\n" uses CR endings.
func parseDoc(s string) doc {
	var d doc
	if strings.HasPrefix(s, bom) {
		d.bom, s = bom, s[len(bom):]
	}
	sep := "\n"
	if !strings.Contains(s, "\n") && strings.Contains(s, "\r") {
		sep = "\r"
	}
	for s != "" {
		i := strings.Index(s, sep)
		if i < 0 {
			d.lines = append(d.lines, line{body: s})
			break
		}
		l := line{body: s[:i], eol: sep}
		if sep == "\n" && strings.HasSuffix(l.body, "\r") {
			l.body, l.eol = l.body[:len(l.body)-1], "\r\n"
		}
		d.lines = append(d.lines, l)
		s = s[i+len(sep):]
	}
	return d
}

func (d doc) String() string {
	var b strings.Builder
	n := len(d.bom)
	for _, l := range d.lines {
		n += len(l.body) + len(l.eol)
	}
	b.Grow(n)
	b.WriteString(d.bom)
	for _, l := range d.lines {
		b.WriteString(l.body)
		b.WriteString(l.eol)
	}
	return b.String()
}

func (d doc) bodies() []string {
	out := make([]string, len(d.lines))
	for i, l := range d.lines {
		out[i] = l.body
	}
	return out
}

// endsWithEOL reports whether the last line has a line ending.
func (d doc) endsWithEOL() bool {
	return len(d.lines) > 0 && d.lines[len(d.lines)-1].eol != ""
}

// eol is the file's most common line ending, "\n" when it has none; new
// lines with no neighbour to copy from get it.
func (d doc) eol() string {
	counts := map[string]int{}
	for _, l := range d.lines {
		if l.eol != "" {
			counts[l.eol]++
		}
	}
	best, n := "\n", counts["\n"]
	for _, e := range []string{"\r\n", "\r"} {
		if counts[e] > n {
			best, n = e, counts[e]
		}
	}
	return best
}

// snippetLines splits text from the model (old_string, new_string) into
// line bodies: any line ending, a final one dropped.
func snippetLines(s string) []string {
	return parseDoc(s).bodies()
}

// splice replaces the lines [from, to) of d with bodies. New lines take
// the endings of the lines they replace, one for one, then of their
// neighbours: a CRLF file stays CRLF, a mixed file keeps its mix, and the
// last line keeps having a final newline or not.
func (d doc) splice(from, to int, bodies []string) doc {
	def := d.eol()
	repl := make([]line, len(bodies))
	n := to - from
	for j, b := range bodies {
		eol := ""
		switch {
		case j == len(bodies)-1 && n > 0:
			eol = d.lines[to-1].eol
		case n > 0:
			eol = d.lines[from+min(j, n-1)].eol
		case from < len(d.lines):
			eol = d.lines[from].eol
		case from > 0:
			eol = d.lines[from-1].eol
		}
		if eol == "" && (j < len(bodies)-1 || to < len(d.lines) || n == 0 && from < len(d.lines)) {
			eol = def
		}
		repl[j] = line{body: b, eol: eol}
	}
	out := make([]line, 0, len(d.lines)-n+len(repl))
	out = append(out, d.lines[:from]...)
	if n == 0 && from == len(d.lines) && from > 0 && len(repl) > 0 && out[from-1].eol == "" {
		// Appending to a file without a final newline: the old last line
		// gets one, the new last line goes without.
		out[from-1].eol = def
		repl[len(repl)-1].eol = ""
	}
	out = append(out, repl...)
	out = append(out, d.lines[to:]...)
	if len(d.lines) == 0 && len(out) > 0 && out[len(out)-1].eol == "" {
		out[len(out)-1].eol = def // an empty file gets a final newline
	}
	return doc{bom: d.bom, lines: out}
}
