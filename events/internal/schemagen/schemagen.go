// Package schemagen generates the published event protocol, a JSON Schema
// and TypeScript types, from the Go types of package events: field names,
// types and optionality by reflection, descriptions from the doc comments
// and enumerations from the constants, both read from the package source.
// events' TestProtocolFiles runs it and fails when docs/ drifts; run
// `go generate ./events` (or that test with -update) to rewrite them.
package schemagen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/events"
)

// payloads are the payload types in protocol order.
var payloadTypes = []events.Payload{
	events.AgentPhase{}, events.ToolCall{}, events.FileUpdate{}, events.SelfRepair{},
	events.Log{}, events.Error{}, events.Progress{}, events.ToolApprovalRequested{}, events.ToolApprovalAnswered{},
}

// enums maps a payload field to the constants that are its values: a
// constant name prefix (untyped constants) or a named type.
var enums = map[string]string{
	"AgentPhase.Phase":              "Phase",
	"AgentPhase.Action":             "Action",
	"AgentPhase.Status":             "task status",
	"FileUpdate.Op":                 "Op",
	"Log.Level":                     "Level",
	"SelfRepair.Result":             "Result",
	"Progress.Kind":                 "ProgressKind",
	"ToolApprovalAnswered.Decision": "Decision",
}

// fixed are enumerations that have no constants in package events.
var fixed = map[string][]string{
	"Action":      {"enter", "exit"},
	"Result":      {"pending", "success", "failed"},
	"task status": {"queued", "running", "succeeded", "failed", "blocked", "cancelled", "paused", "awaiting_input", "waiting", "review", "awaiting_approval"},
}

// source is what the generator reads from the package's Go files.
type source struct {
	typeDocs  map[string]string   // type name → doc
	fieldDocs map[string]string   // Type.Field → doc
	consts    map[string][]string // declared type name → values, in order
	prefixed  map[string][]string // name prefix → values of untyped constants
}

func parse(dir string) (*source, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, nil, parser.ParseComments)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", dir, err)
	}
	pkg, ok := pkgs["events"]
	if !ok {
		return nil, fmt.Errorf("parse %s: no package events", dir)
	}
	src := &source{typeDocs: map[string]string{}, fieldDocs: map[string]string{}, consts: map[string][]string{}, prefixed: map[string][]string{}}
	names := make([]string, 0, len(pkg.Files))
	for name := range pkg.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		for _, decl := range pkg.Files[name].Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					doc := s.Doc
					if doc == nil {
						doc = gd.Doc
					}
					src.typeDocs[s.Name.Name] = clean(doc.Text())
					if st, ok := s.Type.(*ast.StructType); ok {
						for _, f := range st.Fields.List {
							text := f.Doc.Text()
							if f.Comment != nil {
								text += " " + f.Comment.Text()
							}
							for _, n := range f.Names {
								src.fieldDocs[s.Name.Name+"."+n.Name] = clean(text)
							}
						}
					}
				case *ast.ValueSpec:
					if gd.Tok != token.CONST || len(s.Values) != len(s.Names) {
						continue
					}
					for i, n := range s.Names {
						lit, ok := s.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						v, _ := strconv.Unquote(lit.Value)
						if id, ok := s.Type.(*ast.Ident); ok {
							src.consts[id.Name] = append(src.consts[id.Name], v)
							continue
						}
						for _, prefix := range []string{"Phase", "Op", "Level", "Decision"} {
							if strings.HasPrefix(n.Name, prefix) {
								src.prefixed[prefix] = append(src.prefixed[prefix], v)
							}
						}
					}
				}
			}
		}
	}
	return src, nil
}

func clean(s string) string { return strings.Join(strings.Fields(s), " ") }

func (s *source) enum(typeName, field string) []string {
	key, ok := enums[typeName+"."+field]
	if !ok {
		return nil
	}
	if v, ok := fixed[key]; ok {
		return v
	}
	if v, ok := s.consts[key]; ok {
		return v
	}
	return s.prefixed[key]
}

// field is one JSON property of a payload.
type field struct {
	name     string
	doc      string
	required bool
	schema   map[string]any
	ts       string
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
	uuidType = reflect.TypeFor[uuid.UUID]()
)

func (s *source) fields(t reflect.Type) ([]field, error) {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fd := field{name: name, doc: s.fieldDocs[t.Name()+"."+f.Name], required: !strings.Contains(opts, "omitempty")}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
			fd.required = false
		}
		switch {
		case ft == timeType:
			fd.schema, fd.ts = map[string]any{"type": "string", "format": "date-time"}, "string"
		case ft == rawType:
			fd.schema, fd.ts = map[string]any{}, "unknown"
		case ft == uuidType:
			fd.schema, fd.ts = map[string]any{"type": "string", "format": "uuid"}, "string"
		case ft.Kind() == reflect.String:
			fd.schema, fd.ts = map[string]any{"type": "string"}, "string"
			if vals := s.enum(t.Name(), f.Name); vals != nil {
				fd.schema["enum"] = vals
				quoted := make([]string, len(vals))
				for i, v := range vals {
					quoted[i] = strconv.Quote(v)
				}
				fd.ts = strings.Join(quoted, " | ")
			}
		case ft.Kind() == reflect.Bool:
			fd.schema, fd.ts = map[string]any{"type": "boolean"}, "boolean"
		case ft.Kind() >= reflect.Int && ft.Kind() <= reflect.Int64:
			fd.schema, fd.ts = map[string]any{"type": "integer"}, "number"
		case ft.Kind() == reflect.Map && ft.Key().Kind() == reflect.String:
			fd.schema, fd.ts = map[string]any{"type": "object"}, "Record<string, unknown>"
		default:
			return nil, fmt.Errorf("%s.%s: no schema for Go type %s", t.Name(), f.Name, ft)
		}
		if fd.doc != "" {
			fd.schema["description"] = fd.doc
		}
		out = append(out, fd)
	}
	return out, nil
}

// Generate returns the JSON Schema and the TypeScript declarations of the
// event protocol, reading doc comments and constants from the Go source of
// package events in dir.
func Generate(dir string) (schema, ts []byte, err error) {
	src, err := parse(dir)
	if err != nil {
		return nil, nil, err
	}
	if got, want := len(payloadTypes), len(src.consts["Type"]); got != want {
		return nil, nil, fmt.Errorf("events declares %d event types but schemagen knows %d payloads", want, got)
	}

	defs := map[string]any{}
	var oneOf []any
	var tsb bytes.Buffer
	tsb.WriteString("// Code generated by events/internal/schemagen from the Go types of package events; DO NOT EDIT.\n\n")
	fmt.Fprintf(&tsb, "/** %s */\nexport type AgentEventType = %s;\n\n", src.typeDocs["Type"], union(src.consts["Type"]))
	fmt.Fprintf(&tsb, "/** %s */\nexport type ProgressKind = %s;\n\n", src.typeDocs["ProgressKind"], union(src.consts["ProgressKind"]))
	tsb.WriteString("/** " + src.typeDocs["Event"] + " */\nexport interface BaseAgentEvent {\n")
	tsb.WriteString("  /** Project-wide event id (bigserial). */\n  id: number;\n  task_id: string;\n  project_id: string;\n  /** Per-task sequence number, from 1, gap-free, in commit order. */\n  seq: number;\n  created_at: string;\n}\n\n")

	var eventNames []string
	for _, p := range payloadTypes {
		t := reflect.TypeOf(p)
		fields, err := src.fields(t)
		if err != nil {
			return nil, nil, err
		}
		props := map[string]any{}
		var required []string
		fmt.Fprintf(&tsb, "/** %s */\nexport interface %sPayload {\n", src.typeDocs[t.Name()], t.Name())
		for _, f := range fields {
			props[f.name] = f.schema
			opt := "?"
			if f.required {
				required = append(required, f.name)
				opt = ""
			}
			if f.doc != "" {
				fmt.Fprintf(&tsb, "  /** %s */\n", f.doc)
			}
			fmt.Fprintf(&tsb, "  %s%s: %s;\n", f.name, opt, f.ts)
		}
		tsb.WriteString("}\n\n")
		def := map[string]any{"type": "object", "description": src.typeDocs[t.Name()], "properties": props}
		if required != nil {
			def["required"] = required
		}
		defs[t.Name()+"Payload"] = def

		name := t.Name() + "Event"
		eventNames = append(eventNames, name)
		typ := string(p.EventType())
		defs[name] = map[string]any{
			"type":     "object",
			"required": []string{"id", "task_id", "project_id", "seq", "type", "payload", "created_at"},
			"properties": map[string]any{
				"id":         map[string]any{"type": "integer"},
				"task_id":    map[string]any{"type": "string", "format": "uuid"},
				"project_id": map[string]any{"type": "string", "format": "uuid"},
				"seq":        map[string]any{"type": "integer", "minimum": 1},
				"type":       map[string]any{"const": typ},
				"payload":    map[string]any{"$ref": "#/$defs/" + t.Name() + "Payload"},
				"created_at": map[string]any{"type": "string", "format": "date-time"},
			},
		}
		oneOf = append(oneOf, map[string]any{"$ref": "#/$defs/" + name})
		fmt.Fprintf(&tsb, "export interface %s extends BaseAgentEvent {\n  type: %q;\n  payload: %sPayload;\n}\n\n", name, typ, t.Name())
	}
	fmt.Fprintf(&tsb, "/** One event as the SSE gateway sends it in a message's data. */\nexport type AgentEvent =\n  | %s;\n", strings.Join(eventNames, "\n  | "))

	doc := map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         "https://github.com/agentworker/agentworker/docs/events.schema.json",
		"title":       "AgentEvent",
		"description": "One agent event as stored in agent_events and sent by the SSE gateway. Generated from package events; do not edit.",
		"oneOf":       oneOf,
		"$defs":       defs,
	}
	schema, err = json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("encode schema: %w", err)
	}
	return append(schema, '\n'), tsb.Bytes(), nil
}

func union(vals []string) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, " | ")
}
