// Package prompts holds the embedded, versioned system prompt templates of
// each task type and renders them with the task's context.
package prompts

import (
	"bytes"
	"embed"
	"fmt"
	"text/template"
)

// Version identifies the prompt set; it is recorded with each task's result
// so a change in behaviour can be traced to a prompt change.
const Version = "2026-11-22.1"

//go:embed templates/*.tmpl
var templateFiles embed.FS

// Context is what a prompt is rendered with.
type Context struct {
	ProjectID string
	Files     []string // paths, already capped by the caller
	FileCount int      // all files in the project
	Truncated bool
}

// Set is the parsed prompt templates.
type Set struct {
	tmpl *template.Template
}

// Load parses the embedded templates.
func Load() (*Set, error) {
	t, err := template.New("prompts").Option("missingkey=error").ParseFS(templateFiles, "templates/*.tmpl")
	if err != nil {
		return nil, fmt.Errorf("parse prompt templates: %w", err)
	}
	return &Set{tmpl: t}, nil
}

// System renders the system prompt of a task type.
func (s *Set) System(taskType string, c Context) (string, error) {
	t := s.tmpl.Lookup(taskType + ".tmpl")
	if t == nil {
		return "", fmt.Errorf("render system prompt: no template for task type %q", taskType)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, c); err != nil {
		return "", fmt.Errorf("render %s system prompt: %w", taskType, err)
	}
	return buf.String(), nil
}
