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
}

// Replace replaces old with new in content. Without replaceAll, old must
// match exactly one place (in the first layer that matches anywhere).
func Replace(content, old, new string, replaceAll bool) (Edit, error) {
	if old == "" {
		return Edit{}, ErrEmptySnippet
	}
	if n := strings.Count(content, old); n > 0 {
		first := strings.Index(content, old)
		line := strings.Count(content[:first], "\n") + 1
		if n > 1 && !replaceAll {
			return Edit{}, &AmbiguousError{Lines: exactLines(content, old), Layer: Exact}
		}
		if replaceAll {
			return Edit{Content: strings.ReplaceAll(content, old, new), Layer: Exact, Replaced: n, Line: line}, nil
		}
		return Edit{Content: strings.Replace(content, old, new, 1), Layer: Exact, Replaced: 1, Line: line}, nil
	}
	file := split(content)
	block := snippetLines(old)
	layer, starts := findLines(file.lines, block, 0)
	if len(starts) == 0 {
		return Edit{}, nearest(file.lines, block)
	}
	if len(starts) > 1 && !replaceAll {
		return Edit{}, &AmbiguousError{Lines: plusOne(starts), Layer: layer}
	}
	repl := snippetLines(new)
	if new == "" {
		repl = nil
	}
	out := make([]string, 0, len(file.lines))
	prev := 0
	for _, s := range starts {
		out = append(out, file.lines[prev:s]...)
		r := repl
		if layer == NormalisedWhitespace {
			r = reindent(repl, block, file.lines[s:s+len(block)])
		}
		out = append(out, r...)
		prev = s + len(block)
	}
	out = append(out, file.lines[prev:]...)
	return Edit{Content: text{lines: out, eol: file.eol}.String(), Layer: layer, Replaced: len(starts), Line: starts[0] + 1}, nil
}

// ReplaceLines replaces lines start..end (1-based, inclusive) with new.
// end = start-1 inserts new before line start; start = total+1 appends.
func ReplaceLines(content string, start, end int, new string) (string, error) {
	file := split(content)
	total := len(file.lines)
	if start < 1 || start > total+1 || end < start-1 || end > total {
		return "", &RangeError{Start: start, End: end, Total: total}
	}
	var repl []string
	if new != "" {
		repl = snippetLines(new)
	}
	out := make([]string, 0, total+len(repl))
	out = append(out, file.lines[:start-1]...)
	out = append(out, repl...)
	out = append(out, file.lines[end:]...)
	eol := file.eol || total == 0
	return text{lines: out, eol: eol}.String(), nil
}

func exactLines(content, old string) []int {
	var lines []int
	offset := 0
	for {
		i := strings.Index(content[offset:], old)
		if i < 0 {
			return lines
		}
		lines = append(lines, strings.Count(content[:offset+i], "\n")+1)
		offset += i + len(old)
	}
}

func plusOne(starts []int) []int {
	out := make([]int, len(starts))
	for i, s := range starts {
		out[i] = s + 1
	}
	return out
}
