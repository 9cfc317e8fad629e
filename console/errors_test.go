package console_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentworker/agentworker/console"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/llmtest"
)

// apiErrorCodes reads, from the sources, every error code the API can
// answer: the api package's Code constants and the codes of the task
// graph's rules (sql's graphRules), which the API answers as they are.
func apiErrorCodes(t *testing.T) []string {
	t.Helper()
	codes := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range []string{"../api", "../sql"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ValueSpec: // const CodeX = "X" (api)
					for i, id := range n.Names {
						if dir == "../api" && strings.HasPrefix(id.Name, "Code") && i < len(n.Values) {
							if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								v, _ := strconv.Unquote(lit.Value)
								codes[v] = true
							}
						}
						if id.Name == "graphRules" && i < len(n.Values) { // constraint → code (sql)
							for _, el := range n.Values[i].(*ast.CompositeLit).Elts {
								v, _ := strconv.Unquote(el.(*ast.KeyValueExpr).Value.(*ast.BasicLit).Value)
								codes[v] = true
							}
						}
					}
				}
				return true
			})
		}
	}
	var out []string
	for c := range codes {
		out = append(out, c)
	}
	sort.Strings(out)
	if len(out) < 20 {
		t.Fatalf("found only %d error codes in the sources: %v", len(out), out)
	}
	return out
}

// TestEveryErrorCodeExplainedInChromium: every error code the API can
// answer has a sentence in the console saying what to do, in the page's
// own JavaScript; an unknown code still shows the server's words.
func TestEveryErrorCodeExplainedInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	codes := apiErrorCodes(t)
	srv := httptest.NewServer(console.Handler())
	t.Cleanup(srv.Close)
	ctx := browse(t, 60*time.Second)
	run(t, ctx, "open the page", chromedp.Navigate(srv.URL), chromedp.WaitReady(chromedp.CSS(`body`)))
	var got struct {
		Missing []string `json:"missing"`
		Unknown string   `json:"unknown"`
		Sample  string   `json:"sample"`
	}
	list := `["` + strings.Join(codes, `","`) + `"]`
	eval(t, ctx, `import("/errors.js").then(({ ADVICE, explain }) => ({
		missing: `+list+`.filter(c => !ADVICE[c] || !/: /.test(ADVICE[c].say)),
		unknown: explain(418, "TEAPOT", "short and stout"),
		sample: explain(400, "VALIDATION_ERROR", "priority must be 1 (most urgent) to 4"),
	}))`, &got)
	if len(got.Missing) > 0 {
		t.Errorf("codes the API answers with no sentence saying what to do: %v", got.Missing)
	}
	if got.Unknown != "The server refused this (TEAPOT): short and stout" {
		t.Errorf("an unknown code reads %q", got.Unknown)
	}
	if got.Sample != "A value was refused: correct it and try again. priority must be 1 (most urgent) to 4" {
		t.Errorf("a validation error reads %q", got.Sample)
	}
	t.Logf("%d codes explained: %v", len(codes), codes)
}

// TestRefusalClearedInChromium: a refusal reads as what to do, with its
// code kept in data-code, and is gone once another task is opened.
func TestRefusalClearedInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	c := newConsole(t, scripted.Func(func(*scripted.Request) scripted.Reply { return llmtest.Text("hello") }))
	var task struct{ ID string }
	if err := json.Unmarshal(c.api(t, "POST", "/v1/projects/"+c.project.String()+"/tasks", `{"type": "chat", "prompt": "say hello"}`), &task); err != nil {
		t.Fatal(err)
	}
	ctx := browse(t, 90*time.Second)
	row := fmt.Sprintf(`#tasks tr.task-row[data-id="%s"]`, task.ID)
	run(t, ctx, "a refused task", chromedp.Navigate(c.page()), visible(`body[data-project-conn="live"]`), visible(row),
		setValue(`#priority`, "1"), keys(`#prompt`, "x"), click(`#task-input summary`), keys(`#allowed-paths`, "/etc/**"), click(`#submit`),
		visible(`#message[data-code="VALIDATION_ERROR"]`))
	var msg string
	eval(t, ctx, `document.getElementById("message").textContent`, &msg)
	if !strings.HasPrefix(msg, "A value was refused: correct it and try again. input.allowed_paths") || strings.Contains(msg, "POST /v1") {
		t.Errorf("the refusal reads %q", msg)
	}
	screenshot(t, ctx, "refusal-explained")
	run(t, ctx, "open another task", click(row), visible(fmt.Sprintf(`body[data-task="%s"]`, task.ID)),
		until(`document.getElementById("message").textContent === "" && !document.getElementById("message").dataset.code`))
}
