package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
	"github.com/agentworker/agentworker/handlers/docindex"
	"github.com/agentworker/agentworker/testing/s3test"
)

// TestDocumentRoutes: POST …/docs/index indexes the project's documents
// from its files (front matter read, sensitive files left out) and GET
// …/docs lists them by path, a page at a time; a refresh re-reads only
// what changed and drops what is gone; another project's token is refused
// both, and no token is 401.
func TestDocumentRoutes(t *testing.T) {
	t.Parallel()
	store := s3test.NewStore(t)
	e := setup(t, envOpts{store: store})
	project := uuid.New()
	for p, c := range map[string]string{
		"docs/a.md":     "---\ntitle: Alpha\nmandatory: true\ntags: [x, y]\n---\nalpha\n",
		"docs/b.md":     "# Beta\n",
		"docs/c/d.md":   "---\ntype: adr\n---\n# Delta\n",
		"docs/.env.md":  "SECRET=1\n",
		"docs/e.txt":    "not markdown\n",
		"AGENTS.md":     "be careful\n",
		"src/readme.md": "not under docs\n",
	} {
		if _, err := store.Write(t.Context(), project.String(), p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	tok := e.token(t, "", "authenticated", project)
	base := "/v1/projects/" + project.String() + "/docs"
	index := func(want docindex.Stats) {
		t.Helper()
		rp := e.call(t, "POST", base+"/index", tok, "", nil)
		var got docindex.Stats
		if rp.status != http.StatusOK || json.Unmarshal(rp.body, &got) != nil || got != want {
			t.Fatalf("index: %d %s, want 200 %+v", rp.status, rp.body, want)
		}
	}
	list := func(query string) api.Documents {
		t.Helper()
		rp := e.call(t, "GET", base+query, tok, "", nil)
		var got api.Documents
		if rp.status != http.StatusOK || json.Unmarshal(rp.body, &got) != nil {
			t.Fatalf("list%s: %d %s", query, rp.status, rp.body)
		}
		return got
	}

	if got := list(""); len(got.Documents) != 0 || got.Next != "" {
		t.Errorf("before any index: %+v", got)
	}
	index(docindex.Stats{Documents: 4, Read: 4})
	all := list("")
	var paths []string
	for _, d := range all.Documents {
		paths = append(paths, fmt.Sprintf("%s:%s:%s:%v:%v", d.Path, d.Title, d.DocType, d.Mandatory, d.Tags))
	}
	if want := fmt.Sprint([]string{"AGENTS.md:AGENTS:rules:false:[]", "docs/a.md:Alpha::true:[x y]", "docs/b.md:Beta::false:[]", "docs/c/d.md:Delta:adr:false:[]"}); fmt.Sprint(paths) != want {
		t.Errorf("documents %v, want %v", paths, want)
	}
	page := list("?limit=3")
	if len(page.Documents) != 3 || page.Next != "docs/b.md" {
		t.Errorf("first page of 3: %d documents, next %q", len(page.Documents), page.Next)
	}
	if rest := list("?limit=3&after=" + page.Next); len(rest.Documents) != 1 || rest.Documents[0].Path != "docs/c/d.md" || rest.Next != "" {
		t.Errorf("second page: %+v", rest)
	}

	// Nothing changed: nothing is read. One changed, one gone.
	index(docindex.Stats{Documents: 4})
	if _, err := store.Write(t.Context(), project.String(), "docs/b.md", []byte("---\ntitle: Beta two\n---\n")); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(t.Context(), project.String(), "docs/c/d.md"); err != nil {
		t.Fatal(err)
	}
	index(docindex.Stats{Documents: 3, Read: 1, Removed: 1})
	info, err := store.Stat(t.Context(), project.String(), "docs/b.md")
	if err != nil {
		t.Fatal(err)
	}
	if got := list("?after=docs/a.md&limit=1").Documents; len(got) != 1 || got[0].Title != "Beta two" || got[0].ETag != info.ETag {
		t.Errorf("changed document: %+v, want title Beta two at etag %s", got, info.ETag)
	}

	for _, tt := range []struct {
		name, method, path, token string
		status                    int
	}{
		{"OtherProjectIndex", "POST", base + "/index", e.token(t, "", "authenticated", uuid.New()), http.StatusForbidden},
		{"OtherProjectList", "GET", base, e.token(t, "", "authenticated", uuid.New()), http.StatusForbidden},
		{"NoTokenIndex", "POST", base + "/index", "", http.StatusUnauthorized},
		{"NoTokenList", "GET", base, "", http.StatusUnauthorized},
		{"BadLimit", "GET", base + "?limit=0", tok, http.StatusBadRequest},
	} {
		if rp := e.call(t, tt.method, tt.path, tt.token, "", nil); rp.status != tt.status {
			t.Errorf("%s: %d %s, want %d", tt.name, rp.status, rp.body, tt.status)
		}
	}
}

// TestDocumentIndexWithoutStore: with no file store the index route is
// 503, as the files routes are.
func TestDocumentIndexWithoutStore(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	project := uuid.New()
	if rp := e.call(t, "POST", "/v1/projects/"+project.String()+"/docs/index", e.token(t, "", "authenticated", project), "", nil); rp.status != http.StatusServiceUnavailable {
		t.Errorf("index without a store: %d %s", rp.status, rp.body)
	}
}
