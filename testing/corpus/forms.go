package corpus

import (
	"fmt"
	"strings"
)

// Forms of an edit, as a model may send it.
const (
	// Unified is the diff as diff -u or git diff writes it: three lines
	// of context, line numbers, "\ No newline at end of file" markers.
	Unified = "unified"
	// V4A is the "*** Begin Patch" format: no line numbers, context
	// enough to name one place, "@@ line" anchors where it is not.
	V4A = "v4a"
	// Drifted is Unified with its context lines drifted in whitespace the
	// way models drift: trailing spaces added or dropped, tabs written as
	// spaces and spaces as tabs.
	Drifted = "drifted"
	// Bare is Unified with "@@" or "@@ ... @@" headers: no line numbers,
	// so each hunk carries context enough to name one place.
	Bare = "bare"
	// CRLF applies the edit to the file with CRLF line endings; the patch
	// is written with LF lines (as a model writes it) for every other
	// edit, and as a diff of the CRLF files for the rest.
	CRLF = "crlf"
)

// FormNames lists the forms in the order they are reported.
var FormNames = []string{Unified, V4A, Drifted, Bare, CRLF}

// Form is one edit in one form: applying Patch to Base must give Want.
type Form struct {
	Name  string
	Patch string
	Base  string
	Want  string
}

// Forms renders an edit in every form. A form the edit cannot be written
// in is left out, with the reason in skipped (V4A cannot say that a file
// gains or loses its final newline).
func Forms(index int, e Edit) (forms []Form, skipped map[string]string) {
	skipped = map[string]string{}
	oldL, newL := lines(e.Old), lines(e.New)
	s := script(oldL, newL)
	fixed := hunks(s, 3)
	forms = append(forms, Form{Name: Unified, Patch: unified(e.Path, s, fixed, nil, false), Base: e.Old, Want: e.New})
	if strings.HasSuffix(e.Old, "\n") != strings.HasSuffix(e.New, "\n") && e.Old != "" {
		skipped[V4A] = "the edit changes whether the file ends with a newline, which V4A cannot express"
	} else {
		forms = append(forms, Form{Name: V4A, Patch: v4a(e.Path, s, unique(s, oldL, fixed, true)), Base: e.Old, Want: e.New})
	}
	forms = append(forms, Form{Name: Drifted, Patch: unified(e.Path, s, fixed, drift, false), Base: e.Old, Want: e.New})
	forms = append(forms, Form{Name: Bare, Patch: unified(e.Path, s, plain(unique(s, oldL, fixed, false)), nil, true), Base: e.Old, Want: e.New})
	crOld, crNew := ToCRLF(e.Old), ToCRLF(e.New)
	crPatch := unified(e.Path, s, fixed, nil, false)
	if index%2 == 1 {
		cs := script(lines(crOld), lines(crNew))
		crPatch = unified(e.Path, cs, hunks(cs, 3), nil, false)
	}
	forms = append(forms, Form{Name: CRLF, Patch: crPatch, Base: crOld, Want: crNew})
	return forms, skipped
}

// ToCRLF gives every line ending in "\n" alone a "\r" before it.
func ToCRLF(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' && (i == 0 || s[i-1] != '\r') {
			b.WriteByte('\r')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// anchoredHunk is a hunk with the V4A anchor line that precedes it.
type anchoredHunk struct {
	hunk
	anchor string
}

// unique widens each hunk's context until its old text names one place in
// the file at or after the end of the hunk before it (where an applier
// without line numbers searches); failing that it anchors the hunk on an
// earlier line (when anchors are allowed) or merges it with the one before.
func unique(s []op, old []string, hs []hunk, anchors bool) []anchoredHunk {
	var out []anchoredHunk
	bodies := make([]string, len(old))
	for i, l := range old {
		bodies[i] = strings.TrimRight(l, "\r\n")
	}
	for i, h := range hs {
		prevEnd := 0 // the script index the previous hunk ends at
		if len(out) > 0 {
			prevEnd = out[len(out)-1].to
		}
		next := len(s) // the first change of the next hunk
		if i+1 < len(hs) {
			next = hs[i+1].from
			for next < len(s) && s[next].Op == ' ' {
				next++
			}
		}
		h.from = max(h.from, prevEnd)
		for !uniqueAt(s, bodies, h, prevEnd) {
			grown := h
			if grown.from > prevEnd {
				grown.from--
			}
			if grown.to < next {
				grown.to++
			}
			if grown == h || grown.to-grown.from > 40 {
				break
			}
			h = grown
		}
		a := anchoredHunk{hunk: h}
		if !uniqueAt(s, bodies, h, prevEnd) {
			if line, ok := anchorFor(s, bodies, h, prevEnd); anchors && ok {
				a.anchor = line
			}
		}
		// Still not one place: one hunk with those before it, which then
		// starts where they were placed.
		for a.anchor == "" && len(out) > 0 && !uniqueAt(s, bodies, a.hunk, out[len(out)-1].to) {
			prev := out[len(out)-1]
			out = out[:len(out)-1]
			a = anchoredHunk{hunk: hunk{prev.from, a.to}, anchor: prev.anchor}
		}
		out = append(out, a)
	}
	return out
}

// oldFrom is the old line the script index i stands at.
func oldFrom(s []op, i int) int {
	if i < len(s) {
		return s[i].Old
	}
	if len(s) == 0 {
		return 0
	}
	last := s[len(s)-1]
	if last.Op == '+' {
		return last.Old
	}
	return last.Old + 1
}

func oldBlock(s []op, bodies []string, h hunk) []string {
	var block []string
	for _, o := range s[h.from:h.to] {
		if o.Op != '+' {
			block = append(block, bodies[o.Old])
		}
	}
	return block
}

// matches returns the old lines at or after from where block matches.
func matches(bodies, block []string, from int) []int {
	var at []int
	for i := from; i+len(block) <= len(bodies); i++ {
		ok := true
		for j := range block {
			if bodies[i+j] != block[j] {
				ok = false
				break
			}
		}
		if ok {
			at = append(at, i)
		}
	}
	return at
}

func uniqueAt(s []op, bodies []string, h hunk, prevEnd int) bool {
	block := oldBlock(s, bodies, h)
	if len(block) == 0 {
		return false
	}
	return len(matches(bodies, block, oldFrom(s, prevEnd))) == 1
}

// anchorFor finds a line before the hunk whose first occurrence after the
// previous hunk is where it stands, and after which the hunk's first match
// is the right one.
func anchorFor(s []op, bodies []string, h hunk, prevEnd int) (string, bool) {
	from, start := oldFrom(s, prevEnd), oldFrom(s, h.from)
	block := oldBlock(s, bodies, h)
	for a := start - 1; a >= from; a-- {
		if strings.TrimSpace(bodies[a]) == "" || strings.HasPrefix(strings.TrimSpace(bodies[a]), "*** ") {
			continue
		}
		// The applier looks for the anchor exactly first, then ignoring
		// indentation; either way its first find must be this line.
		want := strings.TrimSpace(bodies[a])
		first := -1
		for _, eq := range []func(string) bool{
			func(l string) bool { return l == want },
			func(l string) bool { return strings.TrimSpace(l) == want },
		} {
			for i := from; i < len(bodies) && first < 0; i++ {
				if eq(bodies[i]) {
					first = i
				}
			}
			if first >= 0 {
				break
			}
		}
		if first != a {
			continue
		}
		if at := matches(bodies, block, a); len(at) > 0 && at[0] == start {
			return bodies[a], true
		}
	}
	return "", false
}

// unified renders hunks as a unified diff. Context lines pass through
// driftFn when it is set; bare writes headers without line numbers.
func unified(path string, s []op, hs []hunk, driftFn func(string, int) string, bare bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- a/%s\n+++ b/%s\n", path, path)
	k := 0
	for i, h := range hs {
		if bare {
			if i%2 == 0 {
				b.WriteString("@@\n")
			} else {
				b.WriteString("@@ ... @@\n")
			}
		} else {
			os, on, ns, nn := header(s, h)
			fmt.Fprintf(&b, "@@ -%s +%s @@\n", rangeOf(os, on), rangeOf(ns, nn))
		}
		for _, o := range s[h.from:h.to] {
			text := o.Text
			if o.Op == ' ' && driftFn != nil {
				text = driftFn(text, k)
				k++
			}
			op := o.Op
			b.WriteByte(op)
			b.WriteString(text)
			if !strings.HasSuffix(text, "\n") {
				b.WriteString("\n\\ No newline at end of file\n")
			}
		}
	}
	return b.String()
}

func plain(hs []anchoredHunk) []hunk {
	out := make([]hunk, len(hs))
	for i, h := range hs {
		out[i] = h.hunk
	}
	return out
}

// v4a renders hunks in the V4A format.
func v4a(path string, s []op, hs []anchoredHunk) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*** Begin Patch\n*** Update File: %s\n", path)
	for _, h := range hs {
		if h.anchor != "" {
			b.WriteString("@@ " + strings.TrimSpace(h.anchor) + "\n")
		} else {
			b.WriteString("@@\n")
		}
		for _, o := range s[h.from:h.to] {
			op := o.Op
			b.WriteByte(op)
			b.WriteString(strings.TrimRight(o.Text, "\r\n"))
			b.WriteByte('\n')
		}
		if h.to == len(s) {
			b.WriteString("*** End of File\n")
		}
	}
	b.WriteString("*** End Patch\n")
	return b.String()
}

// drift changes a context line's whitespace as models do, by turns: the
// trailing whitespace, the indentation (tabs to spaces, spaces to tabs),
// or nothing.
func drift(text string, k int) string {
	eol := text[len(strings.TrimRight(text, "\r\n")):]
	body := strings.TrimRight(text, "\r\n")
	switch k % 3 {
	case 0:
		if trimmed := strings.TrimRight(body, " \t"); trimmed != body {
			body = trimmed
		} else {
			body += "  "
		}
	case 1:
		ind := body[:len(body)-len(strings.TrimLeft(body, " \t"))]
		switch {
		case strings.Contains(ind, "\t"):
			body = strings.ReplaceAll(ind, "\t", "    ") + body[len(ind):]
		case ind != "":
			body = strings.Repeat("\t", len(ind)/2) + strings.Repeat(" ", len(ind)%2) + body[len(ind):]
		}
	}
	return body + eol
}
