// Package prompts holds the embedded, versioned system prompt templates of
// each task type and renders them with the task's context.
package prompts

import (
	"bytes"
	"embed"
	"fmt"
	"strings"
	"text/template"
)

// Version identifies the prompt set; it is recorded with each task's result
// so a change in behaviour can be traced to a prompt change. Bump it with
// every template change (the golden tests will remind you).
const Version = "2026-12-01.2"

//go:embed templates/*.tmpl
var templateFiles embed.FS

// Context is what a prompt is rendered with.
type Context struct {
	ProjectID   string
	Files       []string // paths, already capped by the caller
	FileCount   int      // all files in the project
	Truncated   bool
	ProjectType string // react, vue, vanilla, go, unknown
	TypeScript  bool
	Tooling     []string
	EntryPoints []string
	RecentFiles []string
	// PlanSummary is the plan a build follows (from its plan task), if any.
	PlanSummary string
}

// Repair is what the repair prompt is rendered with.
type Repair struct {
	Attempt     int
	MaxAttempts int
	Trigger     string // the termination reason
	Error       string
	Touched     []string
	// FailedCalls are the calls that failed since the last repair, quoted
	// exactly, so the model sees what not to send again.
	FailedCalls []FailedCall
}

// FailedCall is one failed tool call and its error.
type FailedCall struct {
	Call  string // name and arguments, as the model sent them
	Error string
}

// CodeGen is what the code generation prompt of a plan step is rendered with.
type CodeGen struct {
	Task        string
	Path        string
	Language    string
	Description string
	Existing    string // current content, for a change to an existing file
	Exists      bool
}

// Set is the parsed prompt templates.
type Set struct {
	tmpl *template.Template
}

// Load parses the embedded templates.
func Load() (*Set, error) {
	t, err := template.New("prompts").Option("missingkey=error").
		Funcs(template.FuncMap{"join": strings.Join}).ParseFS(templateFiles, "templates/*.tmpl")
	if err != nil {
		return nil, fmt.Errorf("parse prompt templates: %w", err)
	}
	return &Set{tmpl: t}, nil
}

// System renders the system prompt of a task type.
func (s *Set) System(taskType string, c Context) (string, error) {
	return s.render(taskType, c)
}

// RepairMessage renders the user message that starts a self-repair attempt.
func (s *Set) RepairMessage(r Repair) (string, error) {
	return s.render("repair", r)
}

// CodeGenSystem renders the system prompt that asks for one file's code as
// plain text (stage 2 of a plan-driven build).
func (s *Set) CodeGenSystem(c CodeGen) (string, error) {
	return s.render("codegen", c)
}

func (s *Set) render(name string, data any) (string, error) {
	t := s.tmpl.Lookup(name + ".tmpl")
	if t == nil {
		return "", fmt.Errorf("render prompt: no template %q", name)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return "", fmt.Errorf("render %s prompt: %w", name, err)
	}
	return buf.String(), nil
}
