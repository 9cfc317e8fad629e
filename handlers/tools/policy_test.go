package tools_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/handlers/tools"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/storage/storagetest"
	"github.com/agentworker/agentworker/testing/s3test"
)

// policyFiles are in the project, secrets among them, written around the
// tools (an app or a person put them there).
var policyFiles = map[string]string{
	"src/main.go": "package main\n", "docs/readme.md": "# doc\n", ".env": "API_KEY=sk-secret\n",
	"config/.env.production": "DB_PASSWORD=hunter2\n", "certs/server.pem": "-----BEGIN-----\n",
	"keys/deploy.key": "k\n", "home/.ssh/id_rsa": "rsa\n", "app.p12": "p12\n", "big.txt": strings.Repeat("x", 2048),
}

func TestPathJail(t *testing.T) {
	t.Parallel()
	reg, env := setup(t, policyFiles)
	tests := []struct {
		name, tool, args, wantErr string
	}{
		{"ReadDotDot", "read_file", `{"path":"../etc/passwd"}`, "invalid path"},
		{"ReadAbsolute", "read_file", `{"path":"/etc/passwd"}`, "invalid path"},
		{"ReadNestedEscape", "read_file", `{"path":"src/../../x"}`, "invalid path"},
		{"ReadBackslash", "read_file", `{"path":"src\\main.go"}`, "invalid path"},
		{"ReadNUL", "read_file", `{"path":"src/main.go\u0000.txt"}`, "invalid path"},
		{"WriteDotDot", "write_file", `{"path":"../outside.txt","content":"x"}`, "invalid path"},
		{"WriteAbsolute", "write_file", `{"path":"/tmp/x","content":"x"}`, "invalid path"},
		{"DeleteEscape", "delete_file", `{"path":"a/../../b"}`, "invalid path"},
		{"MoveOut", "move_file", `{"fromPath":"src/main.go","toPath":"../main.go"}`, "invalid path"},
		{"ListUp", "list_files", `{"path":".."}`, "invalid path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := reg.Call(t.Context(), env, tt.tool, tt.args)
			if r.Success || !strings.Contains(r.Output, tt.wantErr) {
				t.Fatalf("%s %s = %+v, want a failure containing %q", tt.tool, tt.args, r, tt.wantErr)
			}
		})
	}
}

func TestSensitiveFilesRefused(t *testing.T) {
	t.Parallel()
	reg, env := setup(t, policyFiles)
	tests := []struct {
		name, tool, args string
	}{
		{"ReadDotEnv", "read_file", `{"path":".env"}`},
		{"ReadDotEnvVariant", "read_file", `{"path":"config/.env.production"}`},
		{"ReadPEM", "read_file", `{"path":"certs/server.pem"}`},
		{"ReadKey", "read_file", `{"path":"keys/deploy.key"}`},
		{"ReadSSH", "read_file", `{"path":"home/.ssh/id_rsa"}`},
		{"ReadP12UpperCase", "read_file", `{"path":"APP.P12"}`},
		{"WriteDotEnv", "write_file", `{"path":".env","content":"X=1"}`},
		{"WriteNewKey", "write_file", `{"path":"id_ed25519","content":"k"}`},
		{"EditDotEnv", "edit_file", `{"path":".env","old_string":"API_KEY","new_string":"KEY"}`},
		{"DeletePEM", "delete_file", `{"path":"certs/server.pem"}`},
		{"MoveKeyOut", "move_file", `{"fromPath":"keys/deploy.key","toPath":"keys/deploy.txt"}`},
		{"MoveOntoEnv", "move_file", `{"fromPath":"docs/readme.md","toPath":".env"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := reg.Call(t.Context(), env, tt.tool, tt.args)
			if r.Success || !strings.Contains(r.Output, "sensitive file") {
				t.Fatalf("%s %s = %+v, want refused as a sensitive file", tt.tool, tt.args, r)
			}
		})
	}
	t.Run("NotListedNorSearched", func(t *testing.T) {
		t.Parallel()
		r := reg.Call(t.Context(), env, "search_files", `{"query":"sk-secret|hunter2|BEGIN"}`)
		if !r.Success || strings.Contains(r.Output, "sk-secret") || strings.Contains(r.Output, "hunter2") || strings.Contains(r.Output, "BEGIN") {
			t.Fatalf("search = %+v", r)
		}
		r = reg.Call(t.Context(), env, "list_files", `{}`)
		if !r.Success || strings.Contains(r.Output, ".env") {
			t.Fatalf("list = %+v", r)
		}
	})
	if c, _, _ := env.Store.Read(t.Context(), "p", ".env"); string(c) != "API_KEY=sk-secret\n" {
		t.Errorf(".env changed: %q", c)
	}
}

func TestAllowedPathsAndSizeCaps(t *testing.T) {
	t.Parallel()
	reg, env := setup(t, policyFiles)
	scope, err := storage.NewScope([]string{"src/**", "docs/*.md"})
	if err != nil {
		t.Fatal(err)
	}
	env.Scope, env.MaxReadBytes, env.MaxWriteBytes = scope, 1024, 16
	tests := []struct {
		name, tool, args, wantErr string
	}{
		{"WriteInScope", "write_file", `{"path":"src/pkg/a.go","content":"package pkg"}`, ""},
		{"WriteDocInScope", "write_file", `{"path":"docs/new.md","content":"# new"}`, ""},
		{"WriteOutOfScope", "write_file", `{"path":"main.go","content":"x"}`, "outside this task's allowed paths"},
		{"WriteDocTooDeep", "write_file", `{"path":"docs/a/b.md","content":"x"}`, "outside this task's allowed paths"},
		{"DeleteOutOfScope", "delete_file", `{"path":"big.txt"}`, "outside this task's allowed paths"},
		{"MoveOutOfScope", "move_file", `{"fromPath":"src/main.go","toPath":"main.go"}`, "outside this task's allowed paths"},
		{"ReadOutOfScopeAllowed", "read_file", `{"path":"src/main.go"}`, ""},
		{"WriteTooLarge", "write_file", `{"path":"src/big.go","content":"` + strings.Repeat("y", 17) + `"}`, "over the 16-byte cap"},
		{"ReadTooLarge", "read_file", `{"path":"big.txt"}`, "over the 1024-byte cap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := reg.Call(t.Context(), env, tt.tool, tt.args)
			if tt.wantErr == "" {
				if !r.Success {
					t.Fatalf("%s %s = %+v, want success", tt.tool, tt.args, r)
				}
				return
			}
			if r.Success || !strings.Contains(r.Output, tt.wantErr) {
				t.Fatalf("%s %s = %+v, want a failure containing %q", tt.tool, tt.args, r, tt.wantErr)
			}
		})
	}
}

func TestRequestInputForEveryTaskType(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"chat", "plan", "build"} {
		reg, err := tools.ForTaskType(typ)
		if err != nil {
			t.Fatal(err)
		}
		r := reg.Call(t.Context(), tools.Env{}, "request_input", `{"question":"Which database?"}`)
		if !r.Success || r.Question != "Which database?" {
			t.Errorf("%s: request_input = %+v", typ, r)
		}
		if r := reg.Call(t.Context(), tools.Env{}, "request_input", `{"question":"  "}`); r.Success {
			t.Errorf("%s: an empty question was accepted", typ)
		}
	}
}

// TestReservedPathPrefixes: a path under a reserved file (tasks.md/evil)
// or a file where a reserved file's directory is (docs) is refused at the
// tool, with a structured error naming the reserved file, and nothing is
// written: the service could not write its file after it. Siblings are not.
func TestReservedPathPrefixes(t *testing.T) {
	t.Parallel()
	reg, env := setup(t, map[string]string{"notes.md": "n\n"})
	env.Reserved = []string{"tasks.md", "docs/plan.md"}
	for _, tt := range []struct{ name, tool, args, path, reserved string }{
		{"WriteUnder", "write_file", `{"path":"tasks.md/evil","content":"x"}`, "tasks.md/evil", "tasks.md"},
		{"WriteDeepUnder", "write_file", `{"path":"./tasks.md/a/b","content":"x"}`, "tasks.md/a/b", "tasks.md"},
		{"WriteUnderNested", "write_file", `{"path":"docs/plan.md/x","content":"x"}`, "docs/plan.md/x", "docs/plan.md"},
		{"WriteOverDirectory", "write_file", `{"path":"docs","content":"x"}`, "docs", "docs/plan.md"},
		{"PatchAddUnder", "apply_patch", `{"patch":"*** Begin Patch\n*** Add File: tasks.md/evil\n+x\n*** End Patch"}`, "tasks.md/evil", "tasks.md"},
		{"MoveUnder", "move_file", `{"fromPath":"notes.md","toPath":"tasks.md/evil"}`, "tasks.md/evil", "tasks.md"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := reg.Call(t.Context(), env, tt.tool, tt.args)
			var body struct {
				Success bool   `json:"success"`
				Error   string `json:"error"`
				Hint    string `json:"hint"`
			}
			if err := json.Unmarshal([]byte(r.Output), &body); err != nil {
				t.Fatalf("%s %s: output %q is not a structured error: %v", tt.tool, tt.args, r.Output, err)
			}
			if r.Success || body.Success || !strings.Contains(body.Error, "the service writes "+tt.reserved+" itself") || body.Hint == "" {
				t.Fatalf("%s %s = %+v, want refused as under reserved %s", tt.tool, tt.args, r, tt.reserved)
			}
			if _, err := env.Store.Stat(t.Context(), "p", tt.path); !errors.Is(err, storage.ErrNotFound) {
				t.Errorf("%s: %s written (%v)", tt.name, tt.path, err)
			}
		})
	}
	for _, p := range []string{"tasks.md.bak", "tasks.mdx/a", "docs/other.md", "doc"} {
		if r := reg.Call(t.Context(), env, "write_file", args(map[string]string{"path": p, "content": "x"})); !r.Success {
			t.Errorf("write_file %s, beside the reserved files = %+v", p, r)
		}
	}
	if r := reg.Call(t.Context(), env, "read_file", `{"path":"notes.md"}`); !r.Success {
		t.Errorf("notes.md moved: %+v", r)
	}
}

// TestReservedPathsReadOnly: the file the service writes itself (tasks.md)
// can be read, never written, edited, deleted, moved or moved onto.
func TestReservedPathsReadOnly(t *testing.T) {
	t.Parallel()
	files := map[string]string{"tasks.md": "# Tasks\n", "notes.md": "n\n"}
	reg, env := setup(t, files)
	env.Reserved = []string{"tasks.md"}
	if r := reg.Call(t.Context(), env, "read_file", `{"path":"tasks.md"}`); !r.Success {
		t.Fatalf("read tasks.md = %+v", r)
	}
	for _, tt := range []struct{ name, tool, args string }{
		{"Write", "write_file", `{"path":"tasks.md","content":"x"}`},
		{"WriteDotSlash", "write_file", `{"path":"./tasks.md","content":"x"}`},
		{"Edit", "edit_file", `{"path":"tasks.md","old_string":"Tasks","new_string":"Mine"}`},
		{"Patch", "apply_patch", `{"patch":"*** Begin Patch\n*** Delete File: tasks.md\n*** End Patch"}`},
		{"Delete", "delete_file", `{"path":"tasks.md"}`},
		{"MoveAway", "move_file", `{"fromPath":"tasks.md","toPath":"old.md"}`},
		{"MoveOnto", "move_file", `{"fromPath":"notes.md","toPath":"tasks.md","overwrite":true}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := reg.Call(t.Context(), env, tt.tool, tt.args)
			if r.Success || !strings.Contains(r.Output, "the service writes this file itself") {
				t.Fatalf("%s %s = %+v, want refused as reserved", tt.tool, tt.args, r)
			}
		})
	}
	if c, _, _ := env.Store.Read(t.Context(), "p", "tasks.md"); string(c) != "# Tasks\n" {
		t.Errorf("tasks.md changed: %q", c)
	}
}

// TestReadIsOneRequest: read_file asks the store once, and a file over the
// read cap is refused by that one request, its content not returned (it
// was a lookup of the size, then the read).
func TestReadIsOneRequest(t *testing.T) {
	t.Parallel()
	for _, s3 := range []bool{false, true} {
		var base storage.Store
		if s3 {
			base = s3test.NewStore(t)
		} else {
			local, err := storage.NewLocal(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			base = local
		}
		store := storagetest.NewCounting(base)
		for p, c := range map[string]string{"small.txt": "hello\n", "big.txt": strings.Repeat("z", 2048)} {
			storagetest.Write(t, base, "p", p, c)
		}
		reg, err := tools.ForTaskType("build")
		if err != nil {
			t.Fatal(err)
		}
		env := tools.Env{Store: store, ProjectID: "p", MaxReadBytes: 1024}
		if r := reg.Call(t.Context(), env, "read_file", `{"path":"small.txt"}`); !r.Success || !strings.Contains(r.Output, "hello") {
			t.Fatalf("s3 %t: read_file small.txt = %+v", s3, r)
		}
		if got := store.Take(); got != "Read 1" {
			t.Errorf("s3 %t: read_file asked the store for %s, want Read 1", s3, got)
		}
		r := reg.Call(t.Context(), env, "read_file", `{"path":"big.txt"}`)
		if r.Success || !strings.Contains(r.Output, "big.txt: 2048 bytes, over the 1024-byte cap") || strings.Contains(r.Output, "zzz") {
			t.Fatalf("s3 %t: read_file big.txt = %+v, want the cap's refusal", s3, r)
		}
		if got := store.Take(); got != "Read 1" {
			t.Errorf("s3 %t: read_file of a file over the cap asked the store for %s, want Read 1", s3, got)
		}
	}
}
