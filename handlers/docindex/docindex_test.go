package docindex_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/handlers/docindex"
	"github.com/agentworker/agentworker/handlers/projectctx"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/s3test"
)

func TestMain(m *testing.M) {
	dbtest.Main(m, s3test.LeakOption())
}

// TestRefreshHostileDocuments: a document over MaxDocumentBytes is indexed
// by its name with a problem and is not read; a malformed front matter is
// indexed with its problem and logged with the path and the reason; the
// refresh itself succeeds.
func TestRefreshHostileDocuments(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	store := s3test.NewStore(t)
	project := uuid.New()
	for p, c := range map[string]string{
		"docs/big.md": "---\ntitle: Never read\nmandatory: true\n---\n" + strings.Repeat("b", docindex.MaxDocumentBytes),
		"docs/bad.md": "---\nmandatory: [\n---\n",
		"docs/ok.md":  "---\ntitle: Fine\n---\n",
	} {
		if _, err := store.Write(t.Context(), project.String(), p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	st, err := docindex.Refresh(t.Context(), pool, store, project, projectctx.RuleNames(nil), log)
	if err != nil || st != (docindex.Stats{Documents: 3, Read: 3}) {
		t.Fatalf("refresh: %+v, %v", st, err)
	}
	rows, err := agentsql.ListDocuments(t.Context(), pool, project, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]agentsql.Document{}
	for _, d := range rows {
		got[d.Path] = d
	}
	if d := got["docs/big.md"]; d.Title != "big" || d.Mandatory || !strings.Contains(d.Problem, "not read") {
		t.Errorf("oversized document: %+v", d)
	}
	if d := got["docs/bad.md"]; d.Title != "bad" || !strings.Contains(d.Problem, "malformed front matter") {
		t.Errorf("malformed document: %+v", d)
	}
	if d := got["docs/ok.md"]; d.Title != "Fine" || d.Problem != "" {
		t.Errorf("good document: %+v", d)
	}
	if !strings.Contains(logs.String(), "document front matter ignored") || !strings.Contains(logs.String(), "path=docs/bad.md") {
		t.Errorf("the malformed front matter was not logged with its path:\n%s", logs.String())
	}
}
