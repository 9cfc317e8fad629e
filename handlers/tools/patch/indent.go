package patch

import "strings"

// lead returns the leading whitespace of s.
func lead(s string) string { return s[:len(s)-len(strings.TrimLeft(s, " \t"))] }

// style is one way of indenting: tabs, or spaces of a width per level.
type style struct {
	tabs  bool
	width int
}

// styleOf infers the style of a set of non-empty indentations: all tabs,
// or all spaces (the level width is their greatest common divisor).
func styleOf(indents []string) (style, bool) {
	var s style
	seen := false
	for _, ind := range indents {
		if ind == "" {
			continue
		}
		tabs := strings.Trim(ind, "\t") == ""
		spaces := strings.Trim(ind, " ") == ""
		switch {
		case !tabs && !spaces:
			return style{}, false
		case !seen:
			s = style{tabs: tabs, width: 1}
			if spaces {
				s.width = len(ind)
			}
			seen = true
		case s.tabs != tabs:
			return style{}, false
		case spaces:
			s.width = gcd(s.width, len(ind))
		}
	}
	return s, seen
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// level is how many levels ind is in this style.
func (s style) level(ind string) (int, bool) {
	switch {
	case ind == "":
		return 0, true
	case s.tabs && strings.Trim(ind, "\t") == "":
		return len(ind), true
	case !s.tabs && s.width > 0 && strings.Trim(ind, " ") == "" && len(ind)%s.width == 0:
		return len(ind) / s.width, true
	}
	return 0, false
}

func (s style) render(level int) string {
	if s.tabs {
		return strings.Repeat("\t", level)
	}
	return strings.Repeat(" ", level*s.width)
}

// consistent reports whether ind could be written in this style.
func (s style) consistent(ind string) bool {
	_, ok := s.level(ind)
	return ok
}

// reindent adapts replacement lines to the file's indentation after a
// match that ignored indentation. old are the lines the model said it
// replaces, matched the file's lines they matched. When the replacement
// is already written in the file's indentation (the model drifted only in
// the lines it quoted), it is kept as it is; otherwise each indentation
// seen on an old line becomes that of its file line, and deeper or other
// levels are converted level by level to the file's style.
func reindent(repl, old, matched []string) []string {
	mapped := map[string]string{} // old indentation → file indentation
	inFile := map[string]bool{}
	var from, to []string // indentations that moved
	for j := range old {
		if blank(old[j]) || blank(matched[j]) {
			continue
		}
		o, f := lead(old[j]), lead(matched[j])
		inFile[f] = true
		if _, ok := mapped[o]; ok {
			continue
		}
		mapped[o] = f
		if o != f {
			from, to = append(from, o), append(to, f)
		}
	}
	if len(from) == 0 {
		return repl
	}
	oldStyle, oldOK := styleOf(from)
	fileStyle, fileOK := styleOf(to)
	// Which indentation is the replacement written in? Each line votes.
	oldVotes, fileVotes := 0, 0
	for _, l := range repl {
		if blank(l) {
			continue
		}
		ind := lead(l)
		f, known := mapped[ind]
		moves := known && f != ind
		switch {
		case moves && !inFile[ind]:
			oldVotes++
		case inFile[ind] && !moves:
			fileVotes++
		case oldOK && fileOK && oldStyle.tabs != fileStyle.tabs:
			if fileStyle.consistent(ind) && !oldStyle.consistent(ind) {
				fileVotes++
			} else if oldStyle.consistent(ind) && !fileStyle.consistent(ind) {
				oldVotes++
			}
		}
	}
	if fileVotes > oldVotes {
		return repl
	}
	// The level offset between the two: the file's level of an old line
	// minus its level in the model's text, the most common one.
	offsets := map[int]int{}
	if oldOK && fileOK {
		for o, f := range mapped {
			ol, ok1 := oldStyle.level(o)
			fl, ok2 := fileStyle.level(f)
			if ok1 && ok2 {
				offsets[fl-ol]++
			}
		}
	}
	offset, best := 0, 0
	for off, n := range offsets {
		if n > best || n == best && off < offset {
			offset, best = off, n
		}
	}
	shiftFrom, shiftTo := indentOf(old), indentOf(matched)
	out := make([]string, len(repl))
	for i, l := range repl {
		ind := lead(l)
		if f, ok := mapped[ind]; ok && !blank(l) {
			out[i] = f + l[len(ind):]
			continue
		}
		if lv, ok := oldStyle.level(ind); ok && best > 0 && lv+offset >= 0 && !blank(l) {
			out[i] = fileStyle.render(lv+offset) + l[len(ind):]
			continue
		}
		switch {
		case blank(l):
			out[i] = l
		case strings.HasPrefix(l, shiftFrom):
			out[i] = shiftTo + l[len(shiftFrom):]
		default:
			out[i] = shiftTo + strings.TrimLeft(l, " \t")
		}
	}
	return out
}

// indentOf returns the leading whitespace of the first non-blank line.
func indentOf(lines []string) string {
	for _, l := range lines {
		if !blank(l) {
			return lead(l)
		}
	}
	return ""
}
