package tools_test

import (
	"strings"
	"testing"
)

// TestEditsKeepTheFilesBytes goes through the tools as the model calls
// them: the edited files keep their line endings, BOM and context lines.
func TestEditsKeepTheFilesBytes(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"crlf.ts":  "\uFEFFexport const a = 1\r\nexport const b = 2\r\n",
		"tabs.go":  "package x\n\nfunc f() {\n\tif ok {  \n\t\treturn\n\t}\n}",
		"quote.md": "It\u2019s \u201cdone\u201d \u2013 ship it.\n",
	}
	tests := []struct {
		name, tool, path string
		args             map[string]any
		want             string
		note             string // in the output
	}{
		{name: "EditFileCRLF", tool: "edit_file", path: "crlf.ts",
			args: map[string]any{"path": "crlf.ts", "old_string": "export const b = 2\n", "new_string": "export const b = 3\nexport const c = 4\n"},
			want: "\uFEFFexport const a = 1\r\nexport const b = 3\r\nexport const c = 4\r\n"},
		{name: "PatchDriftedContext", tool: "apply_patch", path: "tabs.go",
			args: map[string]any{"patch": "--- a/tabs.go\n+++ b/tabs.go\n@@ -3,5 +3,6 @@\n func f() {\n     if ok {\n-        return\n+        log()\n+        return\n     }\n }\n\\ No newline at end of file\n"},
			want: "package x\n\nfunc f() {\n\tif ok {  \n\t\tlog()\n\t\treturn\n\t}\n}", note: "ignoring indentation"},
		{name: "V4AIndentedHeadersASCIIQuotes", tool: "apply_patch", path: "quote.md",
			args: map[string]any{"patch": "  *** Begin Patch\n  *** Update File: quote.md\n-It's \"done\" - ship it.\n+It\u2019s shipped.\n  *** End Patch"},
			want: "It\u2019s shipped.\n", note: "Unicode punctuation"},
		{name: "AddFileOverExisting", tool: "apply_patch", path: "crlf.ts",
			args: map[string]any{"patch": "*** Begin Patch\n*** Add File: crlf.ts\n+export const z = 0\n*** End Patch"},
			want: "export const z = 0\n", note: "replaced its whole content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg, env := setup(t, files)
			r := reg.Call(t.Context(), env, tt.tool, args(tt.args))
			if !r.Success {
				t.Fatalf("%s: %s", tt.tool, r.Output)
			}
			got, _, err := env.Store.Read(t.Context(), "p", tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("%s = %q, want %q", tt.path, got, tt.want)
			}
			if !strings.Contains(r.Output, tt.note) {
				t.Errorf("output %s lacks %q", r.Output, tt.note)
			}
		})
	}
}
