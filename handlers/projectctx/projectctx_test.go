package projectctx_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/handlers/projectctx"
	"github.com/agentworker/agentworker/storage"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/s3test"
)

func TestMain(m *testing.M) { dbtest.Main(m, s3test.LeakOption()) }

func TestBuild(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   map[string]string
		want    string
		entries string
	}{
		{name: "React", files: map[string]string{"package.json": `{"dependencies":{"react":"18","vite":"5"}}`, "src/main.tsx": "", "index.html": "", "node_modules/x/y.js": ""},
			want: projectctx.TypeReact, entries: "[index.html src/main.tsx]"},
		{name: "Vue", files: map[string]string{"package.json": `{"dependencies":{"vue":"3"}}`, "src/App.vue": ""}, want: projectctx.TypeVue, entries: "[src/App.vue]"},
		{name: "Vanilla", files: map[string]string{"index.html": "", "app.js": ""}, want: projectctx.TypeVanilla, entries: "[index.html]"},
		{name: "Go", files: map[string]string{"go.mod": "module x", "cmd/x/main.go": ""}, want: projectctx.TypeGo, entries: "[cmd/x/main.go]"},
		{name: "Unknown", files: map[string]string{"notes.md": ""}, want: projectctx.TypeUnknown, entries: "[]"},
	}
	store, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			project := uuid.NewString()
			for p, c := range tt.files {
				if _, err := store.Write(t.Context(), project, p, []byte(c)); err != nil {
					t.Fatal(err)
				}
			}
			s, err := projectctx.Build(t.Context(), store, project, projectctx.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if s.Type != tt.want || fmt.Sprint(s.EntryPoints) != tt.entries {
				t.Fatalf("type %s entries %v, want %s %s", s.Type, s.EntryPoints, tt.want, tt.entries)
			}
			for _, f := range s.Files {
				if f == "node_modules/x/y.js" {
					t.Fatal("node_modules listed")
				}
			}
		})
	}
}

// BenchmarkBuild measures the context build against MinIO for projects of
// 200 and 2,000 files (seed target: under 5 s for 200 files).
func BenchmarkBuild(b *testing.B) {
	store := s3test.NewStore(b)
	for _, n := range []int{200, 2000} {
		project := uuid.NewString()
		for i := range n {
			p := fmt.Sprintf("src/mod%02d/file%04d.ts", i%40, i)
			if i == 0 {
				p = "package.json"
			}
			content := []byte(`export const x = 1` + "\n")
			if i == 0 {
				content = []byte(`{"dependencies":{"react":"18"}}`)
			}
			if _, err := store.Write(b.Context(), project, p, content); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("Files%d", n), func(b *testing.B) {
			for b.Loop() {
				s, err := projectctx.Build(b.Context(), store, project, projectctx.Options{})
				if err != nil || s.FileCount != n {
					b.Fatalf("count %d, %v", s.FileCount, err)
				}
			}
		})
	}
}
