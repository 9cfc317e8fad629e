package patch

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Kind is what a patch does to one file.
type Kind string

// File operations of a patch.
const (
	Add    Kind = "add"
	Update Kind = "update"
	Delete Kind = "delete"
)

// FileOp is the part of a patch about one file.
type FileOp struct {
	Kind    Kind
	Path    string
	MoveTo  string // Update only: rename to this path
	Content string // Add only
	Hunks   []Hunk // Update only
}

// Hunk is one context-anchored change.
type Hunk struct {
	// Anchor is V4A's "@@ text" line: the hunk is searched after it.
	Anchor string
	// OldStart is the unified diff's 1-based old start line, 0 if unknown;
	// it picks between several matches.
	OldStart int
	Lines    []Line
}

// Line is one hunk line: Op is ' ' (context), '-' (removed) or '+' (added).
type Line struct {
	Op   byte
	Text string
}

// ErrNoPatch reports text that holds no file change.
var ErrNoPatch = errors.New("no file changes found: send a unified diff (--- a/x, +++ b/x, @@ hunks) or a V4A patch (*** Begin Patch ... *** End Patch)")

// SyntaxError reports a malformed patch line.
type SyntaxError struct {
	Line int // 1-based line of the patch text
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("patch line %d: %s", e.Line, e.Msg) }

// Parse reads a patch in the V4A format (when it contains "*** Begin
// Patch") or as a unified diff.
func Parse(s string) ([]FileOp, error) {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	var ops []FileOp
	var err error
	if strings.Contains(s, "*** Begin Patch") {
		ops, err = parseV4A(s)
	} else {
		ops, err = parseUnified(s)
	}
	if err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, ErrNoPatch
	}
	return ops, nil
}

func parseV4A(s string) ([]FileOp, error) {
	lines := strings.Split(s, "\n")
	i := 0
	for i < len(lines) && strings.TrimSpace(lines[i]) != "*** Begin Patch" {
		i++
	}
	i++
	var ops []FileOp
	var cur *FileOp
	var hunk *Hunk
	flushHunk := func() {
		if cur != nil && hunk != nil && len(hunk.Lines) > 0 {
			cur.Hunks = append(cur.Hunks, *hunk)
		}
		hunk = nil
	}
	flush := func() {
		flushHunk()
		if cur != nil {
			ops = append(ops, *cur)
		}
		cur = nil
	}
	ended := false
	for ; i < len(lines); i++ {
		l := lines[i]
		n := i + 1
		switch {
		case strings.TrimSpace(l) == "*** End Patch":
			flush()
			ended = true
		case strings.HasPrefix(l, "*** Add File:"):
			flush()
			cur = &FileOp{Kind: Add, Path: strings.TrimSpace(strings.TrimPrefix(l, "*** Add File:"))}
		case strings.HasPrefix(l, "*** Delete File:"):
			flush()
			cur = &FileOp{Kind: Delete, Path: strings.TrimSpace(strings.TrimPrefix(l, "*** Delete File:"))}
		case strings.HasPrefix(l, "*** Update File:"):
			flush()
			cur = &FileOp{Kind: Update, Path: strings.TrimSpace(strings.TrimPrefix(l, "*** Update File:"))}
		case strings.HasPrefix(l, "*** Move to:"):
			if cur == nil || cur.Kind != Update {
				return nil, &SyntaxError{n, "*** Move to: must follow *** Update File:"}
			}
			cur.MoveTo = strings.TrimSpace(strings.TrimPrefix(l, "*** Move to:"))
		case strings.TrimSpace(l) == "*** End of File":
		case cur == nil:
			if strings.TrimSpace(l) != "" {
				return nil, &SyntaxError{n, fmt.Sprintf("expected *** Add File:, *** Update File: or *** Delete File:, got %q", clipLine(l))}
			}
		case cur.Kind == Add:
			if !strings.HasPrefix(l, "+") {
				if l == "" && (i+1 == len(lines) || strings.HasPrefix(lines[i+1], "***")) {
					continue
				}
				return nil, &SyntaxError{n, fmt.Sprintf("every line of an added file starts with '+', got %q", clipLine(l))}
			}
			cur.Content += l[1:] + "\n"
		case cur.Kind == Delete:
			if strings.TrimSpace(l) != "" {
				return nil, &SyntaxError{n, "a deleted file takes no lines"}
			}
		case strings.HasPrefix(l, "@@"):
			flushHunk()
			hunk = &Hunk{Anchor: strings.TrimSpace(strings.TrimPrefix(l, "@@"))}
		default:
			if hunk == nil {
				hunk = &Hunk{}
			}
			switch {
			case l == "":
				// An empty line is blank context whose leading space was lost.
				hunk.Lines = append(hunk.Lines, Line{' ', ""})
			case l[0] == ' ' || l[0] == '-' || l[0] == '+':
				hunk.Lines = append(hunk.Lines, Line{l[0], l[1:]})
			default:
				return nil, &SyntaxError{n, fmt.Sprintf("a hunk line starts with ' ', '-' or '+', got %q", clipLine(l))}
			}
		}
		if ended {
			break
		}
	}
	if !ended {
		return nil, &SyntaxError{len(lines), "missing *** End Patch"}
	}
	for k := range ops {
		trimHunks(&ops[k])
		if ops[k].Path == "" {
			return nil, &SyntaxError{0, fmt.Sprintf("file operation %d has no path", k+1)}
		}
		if ops[k].Kind == Update && len(ops[k].Hunks) == 0 && ops[k].MoveTo == "" {
			return nil, &SyntaxError{0, fmt.Sprintf("*** Update File: %s has no changes", ops[k].Path)}
		}
	}
	return ops, nil
}

// trimHunks drops trailing blank context lines a V4A writer may leave
// before the next header.
func trimHunks(op *FileOp) {
	for h := range op.Hunks {
		ls := op.Hunks[h].Lines
		for len(ls) > 0 && ls[len(ls)-1] == (Line{' ', ""}) {
			ls = ls[:len(ls)-1]
		}
		op.Hunks[h].Lines = ls
	}
}

func parseUnified(s string) ([]FileOp, error) {
	lines := strings.Split(s, "\n")
	var ops []FileOp
	var cur *FileOp
	var hunk *Hunk
	var renameFrom, renameTo string
	flush := func() {
		if cur != nil {
			if hunk != nil {
				cur.Hunks = append(cur.Hunks, *hunk)
			}
			ops = append(ops, *cur)
		}
		cur, hunk = nil, nil
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		n := i + 1
		switch {
		case strings.HasPrefix(l, "diff --git "):
			flush()
			renameFrom, renameTo = "", ""
		case strings.HasPrefix(l, "rename from "):
			renameFrom = strings.TrimPrefix(l, "rename from ")
		case strings.HasPrefix(l, "rename to "):
			renameTo = strings.TrimPrefix(l, "rename to ")
			if renameFrom != "" && (i+1 == len(lines) || !strings.HasPrefix(lines[i+1], "--- ")) {
				// A pure rename without content changes.
				flush()
				ops = append(ops, FileOp{Kind: Update, Path: renameFrom, MoveTo: renameTo})
				renameFrom, renameTo = "", ""
			}
		case strings.HasPrefix(l, "--- ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "+++ "):
			flush()
			from, to := diffPath(l[4:]), diffPath(lines[i+1][4:])
			i++
			switch {
			case from == "" && to == "":
				return nil, &SyntaxError{n, "both sides are /dev/null"}
			case from == "":
				cur = &FileOp{Kind: Add, Path: to}
			case to == "":
				cur = &FileOp{Kind: Delete, Path: from}
			default:
				cur = &FileOp{Kind: Update, Path: from}
				if to != from {
					cur.MoveTo = to
				}
			}
			if renameFrom != "" && renameTo != "" && cur.Kind == Update {
				cur.Path, cur.MoveTo = renameFrom, renameTo
			}
		case strings.HasPrefix(l, "@@"):
			if cur == nil {
				return nil, &SyntaxError{n, "hunk before a --- / +++ file header"}
			}
			if hunk != nil {
				cur.Hunks = append(cur.Hunks, *hunk)
			}
			start, err := oldStart(l)
			if err != nil {
				return nil, &SyntaxError{n, err.Error()}
			}
			hunk = &Hunk{OldStart: start}
		case hunk != nil && l != "" && (l[0] == ' ' || l[0] == '-' || l[0] == '+'):
			hunk.Lines = append(hunk.Lines, Line{l[0], l[1:]})
		case hunk != nil && strings.HasPrefix(l, `\`):
			// "\ No newline at end of file"
		case hunk != nil && l == "":
			// A blank context line that lost its space, unless it ends the patch.
			if rest := strings.TrimSpace(strings.Join(lines[i+1:], "")); rest != "" {
				hunk.Lines = append(hunk.Lines, Line{' ', ""})
			}
		case hunk != nil:
			return nil, &SyntaxError{n, fmt.Sprintf("a hunk line starts with ' ', '-' or '+', got %q", clipLine(l))}
		}
	}
	flush()
	for k := range ops {
		op := &ops[k]
		if op.Kind == Add {
			var b strings.Builder
			for _, h := range op.Hunks {
				for _, hl := range h.Lines {
					if hl.Op != '-' {
						b.WriteString(hl.Text + "\n")
					}
				}
			}
			op.Content, op.Hunks = b.String(), nil
		}
		if op.Kind == Update && len(op.Hunks) == 0 && op.MoveTo == "" {
			return nil, &SyntaxError{0, fmt.Sprintf("the diff of %s has no hunks", op.Path)}
		}
	}
	return ops, nil
}

// diffPath strips the a/ or b/ prefix and timestamps; /dev/null is "".
func diffPath(s string) string {
	s, _, _ = strings.Cut(s, "\t")
	s = strings.TrimSpace(s)
	if s == "/dev/null" {
		return ""
	}
	if strings.HasPrefix(s, "a/") || strings.HasPrefix(s, "b/") {
		return s[2:]
	}
	return s
}

// oldStart reads the old start line of "@@ -l,n +l,n @@"; a bare "@@" is 0.
func oldStart(header string) (int, error) {
	rest := strings.TrimSpace(strings.TrimPrefix(header, "@@"))
	if rest == "" || !strings.HasPrefix(rest, "-") {
		return 0, nil
	}
	field, _, _ := strings.Cut(rest[1:], " ")
	field, _, _ = strings.Cut(field, ",")
	n, err := strconv.Atoi(field)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("malformed hunk header %q", clipLine(header))
	}
	return n, nil
}

func clipLine(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// HunkError reports a hunk that could not be placed.
type HunkError struct {
	Path  string
	Index int // 1-based hunk number within the file
	Err   error
}

func (e *HunkError) Error() string {
	return fmt.Sprintf("%s: hunk %d: %v", e.Path, e.Index, e.Err)
}

func (e *HunkError) Unwrap() error { return e.Err }

// ApplyHunks applies an Update's hunks to content, in order, all or none.
func ApplyHunks(path, content string, hunks []Hunk) (string, error) {
	file := split(content)
	lines := file.lines
	cursor := 0
	for h, hunk := range hunks {
		var old, new []string
		for _, l := range hunk.Lines {
			if l.Op != '+' {
				old = append(old, l.Text)
			}
			if l.Op != '-' {
				new = append(new, l.Text)
			}
		}
		from := cursor
		if hunk.Anchor != "" {
			_, at := findLines(lines, []string{hunk.Anchor}, cursor)
			if len(at) == 0 {
				_, at = findLines(lines, []string{hunk.Anchor}, 0)
			}
			if len(at) == 0 {
				return "", &HunkError{path, h + 1, fmt.Errorf("anchor line %q not found", hunk.Anchor)}
			}
			from = at[0]
			if len(old) == 0 {
				from = at[0] + 1
			}
		}
		var start int
		layer := Exact
		if len(old) == 0 {
			// Pure insertion: after the anchor, at the old start line, or
			// at the end of the file.
			switch {
			case hunk.Anchor != "":
				start = from
			case hunk.OldStart > 0:
				start = min(hunk.OldStart, len(lines))
			default:
				start = len(lines)
			}
		} else {
			var starts []int
			layer, starts = findLines(lines, old, from)
			if len(starts) == 0 && from > 0 {
				// Hunks out of order: search the whole file.
				layer, starts = findLines(lines, old, 0)
			}
			switch {
			case len(starts) == 0:
				return "", &HunkError{path, h + 1, nearest(lines, old)}
			case len(starts) == 1:
				start = starts[0]
			case hunk.OldStart > 0:
				start = closest(starts, hunk.OldStart-1)
			case hunk.Anchor != "":
				start = starts[0] // the first match after the anchor
			default:
				return "", &HunkError{path, h + 1, &AmbiguousError{Lines: plusOne(starts), Layer: layer}}
			}
		}
		if layer == NormalisedWhitespace {
			new = reindent(new, old, lines[start:start+len(old)])
		}
		out := make([]string, 0, len(lines)-len(old)+len(new))
		out = append(out, lines[:start]...)
		out = append(out, new...)
		out = append(out, lines[start+len(old):]...)
		lines = out
		cursor = start + len(new)
	}
	eol := file.eol || len(file.lines) == 0
	return text{lines: lines, eol: eol}.String(), nil
}

func closest(starts []int, want int) int {
	sort.Slice(starts, func(i, j int) bool {
		di, dj := starts[i]-want, starts[j]-want
		return di*di < dj*dj
	})
	return starts[0]
}
