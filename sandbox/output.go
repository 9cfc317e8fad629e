package sandbox

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// What the model reads of a command's output: its head and its tail, where
// tools print their summary and the errors that stopped them.
const (
	ModelHeadBytes = 2 << 10
	ModelTailBytes = 6 << 10
)

// Output is what a command printed (stdout and stderr interleaved): its
// first and last bytes up to the capture's bounds, and how much it printed
// in all. The middle of a long output is never held in memory.
type Output struct {
	Head, Tail []byte
	Bytes      int64 // printed in all
	Lines      int64 // newlines printed in all
}

// Full is the output as kept: all of it, or its head and tail with a note
// of what was cut between them.
func (o Output) Full() string { return o.Text(len(o.Head), len(o.Tail)) }

// ForModel is the output cut for the model's context.
func (o Output) ForModel() string { return o.Text(ModelHeadBytes, ModelTailBytes) }

// Cut reports whether Text(head, tail) leaves something out.
func (o Output) Cut(head, tail int) bool {
	return !o.whole() || o.Bytes > int64(head+tail)
}

// whole reports whether Head and Tail hold everything printed, end to end.
func (o Output) whole() bool { return int64(len(o.Head)+len(o.Tail)) == o.Bytes }

// Text returns at most the first head and the last tail bytes of the
// output, with a line saying how many bytes and lines were cut between them.
// Cuts fall on UTF-8 character boundaries.
func (o Output) Text(head, tail int) string {
	if o.whole() {
		all := append(o.Head[:len(o.Head):len(o.Head)], o.Tail...)
		if len(all) <= head+tail {
			return string(all)
		}
		return o.join(all[:runeStart(all, head)], all[runeEnd(all, len(all)-tail):])
	}
	h := o.Head[:runeStart(o.Head, min(head, len(o.Head)))]
	t := o.Tail[runeEnd(o.Tail, len(o.Tail)-min(tail, len(o.Tail))):]
	return o.join(h, t)
}

func (o Output) join(h, t []byte) string {
	cut := o.Bytes - int64(len(h)) - int64(len(t))
	if cut <= 0 {
		return string(h) + string(t)
	}
	lines := o.Lines - int64(bytes.Count(h, []byte{'\n'})) - int64(bytes.Count(t, []byte{'\n'}))
	var b strings.Builder
	b.Write(h)
	if len(h) > 0 && h[len(h)-1] != '\n' {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "[… %d bytes (%d lines) cut from the middle of %d bytes of output: the first %d and the last %d bytes are shown …]\n",
		cut, max(lines, 0), o.Bytes, len(h), len(t))
	b.Write(t)
	return b.String()
}

// runeStart moves a cut at i back to the start of the character it falls in.
func runeStart(b []byte, i int) int {
	for i > 0 && i < len(b) && !utf8.RuneStart(b[i]) {
		i--
	}
	return i
}

// runeEnd moves a cut at i forward to the start of the next character.
func runeEnd(b []byte, i int) int {
	for i > 0 && i < len(b) && !utf8.RuneStart(b[i]) {
		i++
	}
	return i
}

// capture is the io.Writer a command's output goes to: it keeps the first
// head bytes, the last tail bytes and the counts.
type capture struct {
	head, tail int
	out        Output
}

func newCapture(limit int) *capture {
	return &capture{head: limit / 2, tail: limit - limit/2}
}

func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.out.Bytes += int64(n)
	c.out.Lines += int64(bytes.Count(p, []byte{'\n'}))
	if room := c.head - len(c.out.Head); room > 0 {
		k := min(room, len(p))
		c.out.Head = append(c.out.Head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 || c.tail == 0 {
		return n, nil
	}
	c.out.Tail = append(c.out.Tail, p...)
	if len(c.out.Tail) > 2*c.tail {
		// Drop the front now and then, not on every write.
		c.out.Tail = append(c.out.Tail[:0:0], c.out.Tail[len(c.out.Tail)-c.tail:]...)
	}
	return n, nil
}

// output returns what was captured, the tail trimmed to its bound.
func (c *capture) output() Output {
	o := c.out
	if len(o.Tail) > c.tail {
		o.Tail = o.Tail[len(o.Tail)-c.tail:]
	}
	return o
}

// digits are what NewLines ignores when it compares lines: positions,
// counts and timings change from run to run and with every edit above.
var digits = regexp.MustCompile(`[0-9]+`)

// NewLines returns the lines of after that before does not have, compared
// without digits and surrounding space: the problems a change added to a
// check that already failed. Blank lines are left out.
func NewLines(before, after string) []string {
	seen := map[string]bool{}
	for _, l := range strings.Split(before, "\n") {
		seen[normalize(l)] = true
	}
	var out []string
	for _, l := range strings.Split(after, "\n") {
		n := normalize(l)
		if n != "" && !seen[n] {
			out = append(out, strings.TrimRight(l, " \t\r"))
			seen[n] = true
		}
	}
	return out
}

func normalize(line string) string {
	return strings.TrimSpace(digits.ReplaceAllString(line, ""))
}
