package handlers

import (
	"fmt"
	"strings"

	"github.com/agentworker/agentworker/handlers/projectctx"
	agentsql "github.com/agentworker/agentworker/sql"
)

// Bounds of one dependency's part of the context: a result is the model's
// text, and a plan's tasks may each have changed many files.
const (
	maxDependencySummary = 4 << 10
	maxDependencyFiles   = 100
)

// dependencySection tells the model what the tasks this one depends on
// did: each one's result summary and the files it changed ("" when it has
// no finished dependency).
func dependencySection(deps []agentsql.DependencyResult) string {
	if len(deps) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n\n## What the tasks this one depends on did\nThis task started once these finished; build on their work, which is in the project's files now.\n")
	for _, d := range deps {
		b.WriteString(dependencyEntry(d))
	}
	return b.String()
}

// dependencyEntry is one dependency's part of dependencySection.
func dependencyEntry(d agentsql.DependencyResult) string {
	var b strings.Builder
	name := d.Title
	if name == "" {
		name, _, _ = strings.Cut(strings.TrimSpace(d.Prompt), "\n")
	}
	fmt.Fprintf(&b, "\n### %s task %s: %s\n", d.Type, d.ID, name)
	summary, cut := projectctx.Cut(strings.TrimSpace(d.Summary), maxDependencySummary)
	if cut {
		summary += " […]"
	}
	if summary == "" {
		summary = "(no summary)"
	}
	fmt.Fprintf(&b, "Summary: %s\n", summary)
	if len(d.Files) > 0 {
		b.WriteString("Files changed:")
		for i, f := range d.Files {
			if i == maxDependencyFiles {
				fmt.Fprintf(&b, " and %d more", len(d.Files)-i)
				break
			}
			if i > 0 {
				b.WriteString(",")
			}
			if f.FromPath != "" {
				fmt.Fprintf(&b, " %s → %s (%s)", f.FromPath, f.Path, f.Op)
			} else {
				fmt.Fprintf(&b, " %s (%s)", f.Path, f.Op)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
