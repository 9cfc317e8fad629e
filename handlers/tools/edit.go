package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"path"
	"strings"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/handlers/tools/patch"
	"github.com/agentworker/agentworker/storage"
)

func editFileTool() Tool {
	return Tool{
		Name: "edit_file",
		Description: "Edit part of an existing file. Either replace old_string with new_string (old_string must match exactly one place; " +
			"include enough surrounding lines to make it unique, or set replace_all), or replace the lines start_line..end_line with new_string. " +
			"Read the file first.",
		Parameters: schema([]string{"path", "new_string"}, map[string]any{
			"path":        str("File path relative to the project root."),
			"old_string":  str("The exact text to replace, copied from the file with its indentation."),
			"new_string":  str("The replacement text."),
			"replace_all": boolean("Replace every occurrence of old_string (default false)."),
			"start_line":  intg("Instead of old_string: first line to replace (1-based)."),
			"end_line":    intg("With start_line: last line to replace (inclusive); start_line-1 inserts before start_line."),
		}),
		Access: Write,
		Run: func(ctx context.Context, env Env, raw json.RawMessage) Result {
			var args struct {
				Path       string  `json:"path"`
				OldString  *string `json:"old_string"`
				NewString  *string `json:"new_string"`
				ReplaceAll bool    `json:"replace_all"`
				StartLine  int     `json:"start_line"`
				EndLine    *int    `json:"end_line"`
			}
			if r := decode("edit_file", raw, &args); r != nil {
				return *r
			}
			if args.NewString == nil {
				return Fail("edit_file: new_string is required", "")
			}
			byText, byLines := args.OldString != nil, args.StartLine != 0
			if byText == byLines {
				return Fail("edit_file: give either old_string or start_line (with end_line), not both or neither", "")
			}
			p, err := storage.CleanPath(args.Path)
			if err != nil {
				return storageFail("edit_file", args.Path, err)
			}
			content, read, err := env.Store.Read(ctx, env.ProjectID, p)
			if err != nil {
				return storageFail("edit_file", p, err)
			}
			var updated, how string
			line := args.StartLine
			if byText {
				e, err := patch.Replace(string(content), *args.OldString, *args.NewString, args.ReplaceAll)
				if err != nil {
					return editFail(p, err)
				}
				updated, line = e.Content, e.Line
				how = fmt.Sprintf("replaced %d place(s) (%s) at line %d", e.Replaced, e.Layer, e.Line)
				if e.BlankLines {
					how += ", leaving out blank lines around old_string that the file does not have there"
				}
			} else {
				end := args.StartLine
				if args.EndLine != nil {
					end = *args.EndLine
				}
				if updated, err = patch.ReplaceLines(string(content), args.StartLine, end, *args.NewString); err != nil {
					return editFail(p, err)
				}
				how = fmt.Sprintf("replaced lines %d-%d", args.StartLine, end)
			}
			if updated == string(content) {
				return Fail(fmt.Sprintf("edit_file: the edit leaves %s unchanged", p), "new_string equals the text it replaces")
			}
			info, err := env.Store.WriteIf(ctx, env.ProjectID, p, []byte(updated), read.ETag)
			if err != nil {
				return storageFail("edit_file", p, err)
			}
			summary := fmt.Sprintf("edited %s: %s", p, how)
			r := OK(summary, map[string]any{"path": p, "result": how, "version": info.ETag,
				"window": window(updated, line, strings.Count(*args.NewString, "\n")+1)})
			r.Changes = []events.FileUpdate{{Path: p, Op: events.OpUpdate, Summary: summary, FileSize: info.Size, MimeType: mime.TypeByExtension(path.Ext(p))}}
			return r
		},
	}
}

// editFail turns an edit error into what the model needs to fix its call.
func editFail(p string, err error) Result {
	var nf *patch.NotFoundError
	var amb *patch.AmbiguousError
	var rng *patch.RangeError
	switch {
	case errors.As(err, &nf):
		return Fail(fmt.Sprintf("edit_file %s: %v", p, err),
			"copy old_string exactly from the lines above (· is a space, → a tab, ⏎ the end of a line), or read_file the range first")
	case errors.As(err, &amb):
		return Fail(fmt.Sprintf("edit_file %s: %v", p, err), "add lines around old_string until it names one place, or set replace_all to change every one")
	case errors.As(err, &rng):
		return Fail(fmt.Sprintf("edit_file %s: %v", p, err), "read_file shows the line numbers")
	}
	return Fail(fmt.Sprintf("edit_file %s: %v", p, err), "")
}

// window renders a few lines around an edit, numbered, for the model to check.
func window(content string, line, n int) string {
	lines := strings.Split(content, "\n")
	start := max(line-3, 0)
	end := min(line+n+2, len(lines))
	if start >= end {
		return ""
	}
	var b strings.Builder
	for i := start; i < end; i++ {
		fmt.Fprintf(&b, "%5d| %s\n", i+1, lines[i])
	}
	return b.String()
}

func applyPatchTool() Tool {
	return Tool{
		Name: "apply_patch",
		Description: "Apply a patch to one or more files: a unified diff (--- a/path, +++ b/path, @@ hunks) or the V4A format " +
			"(*** Begin Patch / *** Add File: / *** Update File: / *** Move to: / *** Delete File: / @@ context / *** End Patch). " +
			"Hunks are placed by their context lines; either every change of the patch is applied or none.",
		Parameters: schema([]string{"patch"}, map[string]any{"patch": str("The patch text.")}),
		Access:     Write,
		Run: func(ctx context.Context, env Env, raw json.RawMessage) Result {
			var args struct {
				Patch string `json:"patch"`
			}
			if r := decode("apply_patch", raw, &args); r != nil {
				return *r
			}
			ops, err := patch.Parse(args.Patch)
			if err != nil {
				return Fail("apply_patch: "+err.Error(), "")
			}
			type write struct {
				path, op, from string
				content        []byte
				// ifMatch is the version the patch was made against;
				// conditional is false for a move's target.
				ifMatch     string
				conditional bool
				replaced    bool // an Add over an existing file
				notes       []string
			}
			var writes []write
			var deletes []string
			for _, op := range ops {
				p, err := storage.CleanPath(op.Path)
				if err != nil {
					return storageFail("apply_patch", op.Path, err)
				}
				switch op.Kind {
				case patch.Add:
					// Adding a file that exists replaces it, as the V4A
					// format's reference applier does; the result says so.
					info, err := env.Store.Stat(ctx, env.ProjectID, p)
					switch {
					case err == nil:
						writes = append(writes, write{path: p, op: events.OpUpdate, content: []byte(op.Content), ifMatch: info.ETag, conditional: true, replaced: true})
					case errors.Is(err, storage.ErrNotFound):
						writes = append(writes, write{path: p, op: events.OpCreate, content: []byte(op.Content), conditional: true})
					default:
						return storageFail("apply_patch", p, err)
					}
				case patch.Delete:
					if _, err := env.Store.Stat(ctx, env.ProjectID, p); err != nil {
						return storageFail("apply_patch", p, err)
					}
					deletes = append(deletes, p)
				case patch.Update:
					content, read, err := env.Store.Read(ctx, env.ProjectID, p)
					if err != nil {
						return storageFail("apply_patch", p, err)
					}
					applied, err := patch.Apply(p, string(content), op.Hunks)
					if err != nil {
						var nf *patch.NotFoundError
						var amb *patch.AmbiguousError
						hint := ""
						switch {
						case errors.As(err, &nf):
							hint = "fix the hunk's context and removed lines to match the file (· is a space, → a tab, ⏎ the end of a line)"
						case errors.As(err, &amb):
							hint = "add context lines (or, in V4A, an @@ line naming the enclosing function or class) until the hunk names one place"
						}
						return Fail("apply_patch: "+err.Error()+"; nothing was applied", hint)
					}
					updated := applied.Content
					var notes []string
					for i, h := range applied.Hunks {
						if h.Layer != patch.Exact {
							notes = append(notes, fmt.Sprintf("%s hunk %d matched at line %d %s", p, i+1, h.Line, h.Layer))
						}
					}
					if op.MoveTo == "" {
						writes = append(writes, write{path: p, op: events.OpUpdate, content: []byte(updated), ifMatch: read.ETag, conditional: true, notes: notes})
						continue
					}
					to, err := storage.CleanPath(op.MoveTo)
					if err != nil {
						return storageFail("apply_patch", op.MoveTo, err)
					}
					writes = append(writes, write{path: to, op: events.OpMove, from: p, content: []byte(updated), notes: notes})
					deletes = append(deletes, p)
				}
			}
			var changes []events.FileUpdate
			var done, notes []string
			for _, w := range writes {
				var info storage.FileInfo
				if w.conditional {
					info, err = env.Store.WriteIf(ctx, env.ProjectID, w.path, w.content, w.ifMatch)
				} else {
					info, err = env.Store.Write(ctx, env.ProjectID, w.path, w.content)
				}
				if err != nil {
					return storageFail("apply_patch", w.path, err)
				}
				u := events.FileUpdate{Path: w.path, Op: w.op, FileSize: info.Size, MimeType: mime.TypeByExtension(path.Ext(w.path)),
					Summary: fmt.Sprintf("%s %s by patch", w.op, w.path)}
				if w.op == events.OpMove {
					u.FromPath, u.ToPath = w.from, w.path
				}
				changes = append(changes, u)
				if w.replaced {
					u.Summary = fmt.Sprintf("replace %s by patch (*** Add File over an existing file)", w.path)
					changes[len(changes)-1] = u
					done = append(done, "replace "+w.path)
					notes = append(notes, fmt.Sprintf("%s already existed: *** Add File replaced its whole content", w.path))
				} else {
					done = append(done, w.op+" "+w.path)
				}
				notes = append(notes, w.notes...)
			}
			for _, p := range deletes {
				if err := env.Store.Delete(ctx, env.ProjectID, p); err != nil && !errors.Is(err, storage.ErrNotFound) {
					return storageFail("apply_patch", p, err)
				}
				if !moved(changes, p) {
					changes = append(changes, events.FileUpdate{Path: p, Op: events.OpDelete, Summary: "delete " + p + " by patch"})
					done = append(done, "delete "+p)
				}
			}
			summary := "patch applied: " + strings.Join(done, ", ")
			body := map[string]any{"applied": done}
			if len(notes) > 0 {
				body["notes"] = notes
			}
			r := OK(summary, body)
			r.Changes = changes
			return r
		},
	}
}

func moved(changes []events.FileUpdate, from string) bool {
	for _, c := range changes {
		if c.Op == events.OpMove && c.FromPath == from {
			return true
		}
	}
	return false
}
