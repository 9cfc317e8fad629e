package projectctx

import (
	"bytes"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/agentworker/agentworker/storage"
)

// Bounds of what a document's front matter may set: it is the project's
// text, hostile input.
const (
	// MaxFrontMatter is the most bytes of front matter read; a longer one
	// is ignored.
	MaxFrontMatter = 8 << 10
	maxTitle       = 200
	maxDocType     = 50
	maxTags        = 20
	maxTag         = 50
	// headingLines is how far into a document its first heading is looked
	// for, as its title when the front matter names none.
	headingLines = 50
)

// DocTypeRules is the type of a rules file whose front matter names none.
const DocTypeRules = "rules"

// FindDocuments picks a project's documents from a listing: the Markdown
// under docs/ (at any depth) and the rules files (by names, in any
// folder). Files under excluded folders and files the sensitive-file
// policy refuses never count. The listing's order is kept.
func FindDocuments(listing []storage.FileInfo, names []string) []storage.FileInfo {
	var docs []storage.FileInfo
	for _, f := range listing {
		if IsDocument(f.Path, names) {
			docs = append(docs, f)
		}
	}
	return docs
}

// IsDocument says whether the project path p is a document: Markdown under
// docs/, or a rules file by names.
func IsDocument(p string, names []string) bool {
	if excluded(p) || storage.CheckSensitive(p) != nil {
		return false
	}
	if strings.HasPrefix(p, "docs/") && strings.EqualFold(path.Ext(p), ".md") {
		return true
	}
	return IsRulesFile(p, names)
}

// IsRulesFile says whether p's name is one of the rules file names.
func IsRulesFile(p string, names []string) bool {
	base := path.Base(p)
	for _, n := range names {
		if base == n {
			return true
		}
	}
	return false
}

// DocMeta is what a document's front matter and text say of it.
type DocMeta struct {
	Title     string
	Type      string
	Mandatory bool
	Tags      []string
	// Problem says why the front matter was ignored; "" when it was read
	// or there was none.
	Problem string
	// Body is the document without its front matter.
	Body []byte
}

// frontMatter is what is read of a document's YAML front matter; any
// other key is ignored.
type frontMatter struct {
	Title     string   `yaml:"title"`
	Type      string   `yaml:"type"`
	Mandatory bool     `yaml:"mandatory"`
	Tags      []string `yaml:"tags"`
}

// ParseDocument reads a document's front matter (a YAML mapping between a
// first line "---" and the next line "---" or "..."): title, type,
// mandatory, tags. A front matter that is malformed, not a mapping, of the
// wrong types or longer than MaxFrontMatter is ignored as a whole, Problem
// saying why; the document stays a document. The title defaults to the
// first "# " heading, then to the file name; a rules file's type to
// DocTypeRules.
func ParseDocument(p string, content []byte, names []string) DocMeta {
	m := DocMeta{Body: content}
	if raw, body, found, problem := splitFrontMatter(content); problem != "" {
		m.Problem = problem
	} else if found {
		m.Body = body
		var fm frontMatter
		if err := yaml.Unmarshal(raw, &fm); err != nil {
			m.Problem = clip("malformed front matter: "+err.Error(), 500)
		} else {
			m.Title, m.Type, m.Mandatory = line(fm.Title, maxTitle), line(fm.Type, maxDocType), fm.Mandatory
			for _, tag := range fm.Tags {
				if tag = line(tag, maxTag); tag != "" && len(m.Tags) < maxTags {
					m.Tags = append(m.Tags, tag)
				}
			}
		}
	}
	if m.Title == "" {
		m.Title = line(heading(m.Body), maxTitle)
	}
	if m.Title == "" {
		m.Title = line(strings.TrimSuffix(path.Base(p), path.Ext(p)), maxTitle)
	}
	if m.Type == "" && IsRulesFile(p, names) {
		m.Type = DocTypeRules
	}
	return m
}

// splitFrontMatter finds the front matter at the start of content: its
// YAML, the rest, whether there is one, and why it cannot be read.
func splitFrontMatter(content []byte) (raw, body []byte, found bool, problem string) {
	rest, ok := cutLine(content, "---")
	if !ok {
		return nil, content, false, ""
	}
	for off := 0; off <= len(rest); {
		if off > MaxFrontMatter {
			return nil, content, false, fmt.Sprintf("front matter longer than %d bytes: ignored", MaxFrontMatter)
		}
		end := bytes.IndexByte(rest[off:], '\n')
		next := len(rest) + 1
		if end >= 0 {
			next = off + end + 1
		}
		l := strings.TrimRight(string(rest[off:min(next-1, len(rest))]), "\r")
		if l == "---" || l == "..." {
			return rest[:off], rest[min(next, len(rest)):], true, ""
		}
		off = next
	}
	return nil, content, false, "front matter has no closing ---: ignored"
}

// cutLine returns what follows content's first line when that line is
// want (a trailing \r aside).
func cutLine(content []byte, want string) ([]byte, bool) {
	first, rest, ok := bytes.Cut(content, []byte("\n"))
	if !ok || strings.TrimRight(string(first), "\r ") != want {
		return nil, false
	}
	return rest, true
}

// heading is the text of the first "# " line of a document's head.
func heading(body []byte) string {
	for i, l := range strings.SplitN(string(body), "\n", headingLines+1) {
		if i == headingLines {
			break
		}
		if t, ok := strings.CutPrefix(strings.TrimSpace(l), "# "); ok {
			return t
		}
	}
	return ""
}

// line makes s one line of printable text of at most n bytes: a title or
// tag goes into prompts and lists, where a newline would start text of
// its own.
func line(s string, n int) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return r == '\n' || r == '\r' || r == '\t' || r < 0x20 || r == 0x7f || r == utf8.RuneError
	}), " ")
	return clip(strings.TrimSpace(s), n)
}

func clip(s string, n int) string {
	kept, _ := Cut(s, n)
	return kept
}
