package patch

import (
	"errors"
	"fmt"
	"regexp"
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
	// Anchors are V4A's "@@ text" lines, outermost first: the hunk is
	// searched after the last of them.
	Anchors []string
	// OldStart is the unified diff's 1-based old start line, 0 if unknown;
	// it picks between several matches.
	OldStart int
	// EOF is V4A's "*** End of File": the hunk ends at the end of the file.
	EOF   bool
	Lines []Line
}

// Line is one hunk line: Op is ' ' (context), '-' (removed) or '+' (added).
type Line struct {
	Op   byte
	Text string
	// NoEOL is set by a "\ No newline at end of file" marker after the line:
	// on its side of the diff, the file ends without a newline.
	NoEOL bool
}

// ErrNoPatch reports text that holds no file change.
var ErrNoPatch = errors.New("no file changes found: send a unified diff (--- a/x, +++ b/x, @@ hunks) or a V4A patch (*** Begin Patch ... *** End Patch)")

// SyntaxError reports a malformed patch line.
type SyntaxError struct {
	Line int // 1-based line of the patch text
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("patch line %d: %s", e.Line, e.Msg) }

// V4A markers. Models indent them at times; they are recognised trimmed.
const (
	beginPatch = "*** Begin Patch"
	endPatch   = "*** End Patch"
	addFile    = "*** Add File:"
	deleteFile = "*** Delete File:"
	updateFile = "*** Update File:"
	moveTo     = "*** Move to:"
	endOfFile  = "*** End of File"
)

// Parse reads a patch in the V4A format (when it contains "*** Begin
// Patch") or as a unified diff. Line endings of the patch text do not
// matter: a CRLF patch reads like an LF one.
func Parse(s string) ([]FileOp, error) {
	s = strings.TrimPrefix(strings.ReplaceAll(s, "\r\n", "\n"), bom)
	var ops []FileOp
	var err error
	if strings.Contains(s, beginPatch) {
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
	for i < len(lines) && strings.TrimSpace(lines[i]) != beginPatch {
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
	header := func(t, marker string) (string, bool) {
		if !strings.HasPrefix(t, marker) {
			return "", false
		}
		return strings.TrimSpace(t[len(marker):]), true
	}
	ended := false
	for ; i < len(lines) && !ended; i++ {
		l := lines[i]
		t := strings.TrimSpace(l)
		n := i + 1
		if p, ok := header(t, addFile); ok {
			flush()
			cur = &FileOp{Kind: Add, Path: p}
			continue
		}
		if p, ok := header(t, deleteFile); ok {
			flush()
			cur = &FileOp{Kind: Delete, Path: p}
			continue
		}
		if p, ok := header(t, updateFile); ok {
			flush()
			cur = &FileOp{Kind: Update, Path: p}
			continue
		}
		if p, ok := header(t, moveTo); ok {
			if cur == nil || cur.Kind != Update {
				return nil, &SyntaxError{n, "*** Move to: must follow *** Update File:"}
			}
			cur.MoveTo = p
			continue
		}
		switch {
		case t == endPatch:
			flush()
			ended = true
		case t == endOfFile:
			if hunk != nil {
				hunk.EOF = true
			}
			flushHunk()
		case cur == nil:
			if t != "" {
				return nil, &SyntaxError{n, fmt.Sprintf("expected *** Add File:, *** Update File: or *** Delete File:, got %q", clipLine(l))}
			}
		case cur.Kind == Add:
			if !strings.HasPrefix(l, "+") {
				if t == "" && (i+1 == len(lines) || strings.HasPrefix(strings.TrimSpace(lines[i+1]), "***")) {
					continue
				}
				return nil, &SyntaxError{n, fmt.Sprintf("every line of an added file starts with '+', got %q", clipLine(l))}
			}
			cur.Content += l[1:] + "\n"
		case cur.Kind == Delete:
			if t != "" {
				return nil, &SyntaxError{n, "a deleted file takes no lines"}
			}
		case strings.HasPrefix(l, "@@"):
			if hunk != nil && len(hunk.Lines) > 0 {
				flushHunk()
			}
			if hunk == nil {
				hunk = &Hunk{}
			}
			rest := strings.TrimSpace(strings.TrimPrefix(l, "@@"))
			if start, _, _, ok := rangeHeader(l); ok {
				// A unified hunk header inside V4A: its old start, no anchor.
				hunk.OldStart = start
			} else if rest != "" {
				hunk.Anchors = append(hunk.Anchors, rest)
			}
		default:
			if hunk == nil {
				hunk = &Hunk{}
			}
			switch {
			case l == "":
				// An empty line is blank context whose leading space was lost.
				hunk.Lines = append(hunk.Lines, Line{Op: ' '})
			case l[0] == ' ' || l[0] == '-' || l[0] == '+':
				hunk.Lines = append(hunk.Lines, Line{Op: l[0], Text: l[1:]})
			default:
				return nil, &SyntaxError{n, fmt.Sprintf("a hunk line starts with ' ', '-' or '+', got %q", clipLine(l))}
			}
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
		for len(ls) > 0 && ls[len(ls)-1] == (Line{Op: ' '}) {
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
	// oldLeft and newLeft count the lines the hunk header announced and
	// not yet seen: while some are left, "--- x" is a removed line, not a
	// file header. A header without counts leaves them at 0.
	var oldLeft, newLeft int
	flush := func() {
		if cur != nil {
			if hunk != nil {
				cur.Hunks = append(cur.Hunks, *hunk)
			}
			ops = append(ops, *cur)
		}
		cur, hunk = nil, nil
		oldLeft, newLeft = 0, 0
	}
	add := func(op byte, text string) {
		hunk.Lines = append(hunk.Lines, Line{Op: op, Text: text})
		if op != '+' {
			oldLeft = max(oldLeft-1, 0)
		}
		if op != '-' {
			newLeft = max(newLeft-1, 0)
		}
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		n := i + 1
		if hunk != nil && (oldLeft > 0 || newLeft > 0) {
			switch {
			case l == "" && strings.TrimSpace(strings.Join(lines[i+1:], "")) == "":
				// The end of the patch: the header's counts were too high.
			case l == "":
				add(' ', "")
				continue
			case l[0] == ' ' || l[0] == '-' || l[0] == '+':
				add(l[0], l[1:])
				continue
			case l[0] == '\\':
				markNoEOL(hunk)
				continue
			}
			// The header's counts were wrong: read on without them.
			oldLeft, newLeft = 0, 0
		}
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
			hunk = &Hunk{}
			if start, oldN, newN, ok := rangeHeader(l); ok {
				hunk.OldStart, oldLeft, newLeft = start, oldN, newN
			} else if strings.HasPrefix(strings.TrimSpace(l[2:]), "-") {
				return nil, &SyntaxError{n, fmt.Sprintf("malformed hunk header %q", clipLine(l))}
			}
		case hunk != nil && l != "" && (l[0] == ' ' || l[0] == '-' || l[0] == '+'):
			add(l[0], l[1:])
		case hunk != nil && strings.HasPrefix(l, `\`):
			markNoEOL(hunk)
		case hunk != nil && l == "":
			// A blank context line that lost its space, unless it ends the patch.
			if rest := strings.TrimSpace(strings.Join(lines[i+1:], "")); rest != "" {
				add(' ', "")
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
						b.WriteString(hl.Text)
						if !hl.NoEOL {
							b.WriteString("\n")
						}
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

// markNoEOL applies a "\ No newline at end of file" marker to the line
// before it.
func markNoEOL(h *Hunk) {
	if n := len(h.Lines); n > 0 {
		h.Lines[n-1].NoEOL = true
	}
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

var rangeRE = regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@`)

// rangeHeader reads "@@ -l,n +l,n @@": the old start line and the old and
// new line counts. ok is false for a header without ranges ("@@", "@@ ... @@").
func rangeHeader(header string) (start, oldN, newN int, ok bool) {
	m := rangeRE.FindStringSubmatch(strings.TrimSpace(header))
	if m == nil {
		return 0, 0, 0, false
	}
	count := func(s string) int {
		if s == "" {
			return 1
		}
		n, _ := strconv.Atoi(s)
		return n
	}
	start, _ = strconv.Atoi(m[1])
	return start, count(m[2]), count(m[4]), true
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

// Placed says where and how one hunk was applied.
type Placed struct {
	Line  int // 1-based first line of the hunk's old text in the file as it was then
	Layer Layer
}

// Applied is the outcome of applying an Update's hunks.
type Applied struct {
	Content string
	Hunks   []Placed
}

// ApplyHunks applies an Update's hunks to content, in order, all or none.
func ApplyHunks(path, content string, hunks []Hunk) (string, error) {
	a, err := Apply(path, content, hunks)
	return a.Content, err
}

// Apply applies an Update's hunks to content, in order, all or none, and
// says where each landed. Context lines are written back as the file has
// them; added lines take the line endings of the lines around them.
func Apply(path, content string, hunks []Hunk) (Applied, error) {
	d := parseDoc(content)
	var out Applied
	cursor, delta := 0, 0
	for h, hunk := range hunks {
		next, placed, err := applyHunk(d, hunk, cursor, delta)
		if err != nil {
			return Applied{}, &HunkError{path, h + 1, err}
		}
		delta += len(next.lines) - len(d.lines)
		cursor = placed.end
		d = next
		out.Hunks = append(out.Hunks, Placed{Line: placed.start + 1, Layer: placed.layer})
	}
	out.Content = d.String()
	return out, nil
}

type placement struct {
	start, end int // the hunk's old text started at start; its new text ends before end
	layer      Layer
}

func oldSide(lines []Line) []string {
	var old []string
	for _, l := range lines {
		if l.Op != '+' {
			old = append(old, l.Text)
		}
	}
	return old
}

// dropBlankOld removes the first lead and last trail lines of the old side
// (all blank), keeping the added lines around them.
func dropBlankOld(lines []Line, lead, trail int) []Line {
	out := append([]Line{}, lines...)
	for i := 0; i < len(out) && lead > 0; {
		if out[i].Op != '+' {
			out = append(out[:i], out[i+1:]...)
			lead--
			continue
		}
		i++
	}
	for i := len(out) - 1; i >= 0 && trail > 0; i-- {
		if out[i].Op != '+' {
			out = append(out[:i], out[i+1:]...)
			trail--
		}
	}
	return out
}

// applyHunk places one hunk at or after cursor and returns the new text.
// delta is how far earlier hunks moved the lines (for OldStart).
func applyHunk(d doc, hunk Hunk, cursor, delta int) (doc, placement, error) {
	file := d.bodies()
	f := newFinder(file)
	from := cursor
	for i, a := range hunk.Anchors {
		_, at := f.find([]string{a}, from)
		if len(at) == 0 && i == 0 {
			_, at = f.find([]string{a}, 0)
		}
		if len(at) == 0 {
			return doc{}, placement{}, fmt.Errorf("anchor line %q not found", a)
		}
		from = at[0]
		if i < len(hunk.Anchors)-1 {
			from++
		}
	}
	lines := hunk.Lines
	old := oldSide(lines)
	search := func(block []string) (Layer, []int) {
		layer, starts := f.find(block, from)
		if len(starts) == 0 && from > 0 && len(hunk.Anchors) == 0 {
			// Hunks out of order: search the whole file.
			layer, starts = f.find(block, 0)
		}
		return layer, starts
	}
	var start int
	layer := Exact
	if len(old) == 0 {
		// Pure insertion: after the anchor, at the old start line, or at
		// the end of the file.
		switch {
		case len(hunk.Anchors) > 0:
			start = from + 1
		case hunk.OldStart > 0 && !hunk.EOF:
			start = hunk.OldStart + delta
		default:
			start = len(file)
		}
		start = min(max(start, 0), len(file))
	} else {
		var starts []int
		layer, starts = search(old)
		if len(starts) == 0 {
			// Blank lines around the old text that the file lacks there.
			if lead, trail := trimBlank(old); lead+trail > 0 {
				lines = dropBlankOld(lines, lead, trail)
				old = oldSide(lines)
				layer, starts = search(old)
			}
		}
		switch {
		case len(starts) == 0:
			return doc{}, placement{}, nearest(file, oldSide(hunk.Lines))
		case len(starts) == 1:
			start = starts[0]
		case hunk.OldStart > 0:
			start = closest(starts, hunk.OldStart-1+delta)
		case hunk.EOF && starts[len(starts)-1]+len(old) == len(file):
			start = starts[len(starts)-1]
		case len(hunk.Anchors) > 0:
			start = starts[0] // the first match after the anchor
		default:
			return doc{}, placement{}, &AmbiguousError{Lines: plusOne(starts), Layer: layer}
		}
	}
	return splice(d, start, lines, layer), placement{start: start, end: start + newLen(lines), layer: layer}, nil
}

func newLen(lines []Line) int {
	n := 0
	for _, l := range lines {
		if l.Op != '-' {
			n++
		}
	}
	return n
}

// splice writes a hunk placed at start: context lines as the file has
// them, added lines (re-indented after a match that ignored indentation)
// with the line endings of the lines they replace or stand next to.
func splice(d doc, start int, lines []Line, layer Layer) doc {
	old := oldSide(lines)
	end := start + len(old)
	var added []string
	oldMarked, newMarked := false, false
	for _, l := range lines {
		if l.Op == '+' {
			added = append(added, l.Text)
		}
		oldMarked = oldMarked || l.NoEOL && l.Op != '+'
		newMarked = newMarked || l.NoEOL && l.Op != '-'
	}
	if layer.reindents() {
		added = reindent(added, old, d.bodies()[start:end])
	}
	def := d.eol()
	out := make([]line, 0, len(d.lines)+len(added))
	out = append(out, d.lines[:start]...)
	fi, ai := start, 0
	var removed []string // endings of the lines removed since the last context line
	lastAdded := -1
	for _, l := range lines {
		switch l.Op {
		case ' ':
			out = append(out, d.lines[fi])
			fi++
			removed = removed[:0]
		case '-':
			removed = append(removed, d.lines[fi].eol)
			fi++
		case '+':
			eol := ""
			switch {
			case len(removed) > 0:
				eol, removed = removed[0], removed[1:]
			case fi < len(d.lines):
				eol = d.lines[fi].eol
			case len(out) > 0:
				eol = out[len(out)-1].eol
			}
			lastAdded = len(out)
			out = append(out, line{body: added[ai], eol: eol})
			ai++
		}
	}
	out = append(out, d.lines[end:]...)
	for i := range out[:max(len(out)-1, 0)] {
		if out[i].eol == "" {
			out[i].eol = def
		}
	}
	if n := len(out); n > 0 && lastAdded == n-1 {
		// An added last line: the patch's "\ No newline" markers decide;
		// without them the file keeps having a final newline or not.
		last := &out[n-1]
		switch {
		case newMarked:
			last.eol = ""
		case oldMarked:
			if last.eol == "" {
				last.eol = def
			}
		case len(d.lines) > 0 && !d.endsWithEOL():
			last.eol = ""
		case last.eol == "":
			last.eol = def
		}
	}
	return doc{bom: d.bom, lines: out}
}

func closest(starts []int, want int) int {
	best := starts[0]
	for _, s := range starts[1:] {
		if abs(s-want) < abs(best-want) {
			best = s
		}
	}
	return best
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
