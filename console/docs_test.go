package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/llmtest"
)

// TestDocumentsInChromium: the Documents tab lists the project's documents
// after a refresh — title, type, mandatory, and why a front matter was
// ignored — and opens one rendered as Markdown, its hostile HTML (a
// script, an event handler, a javascript: link) removed; a Markdown file
// of the Files tab is rendered the same way.
func TestDocumentsInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	c := newConsole(t, scripted.Func(func(*scripted.Request) scripted.Reply { return llmtest.Text("hi") }))
	files := map[string]string{
		"docs/guide.md": "---\ntitle: The guide\ntype: guide\nmandatory: true\n---\n# Guide\n\nSome **bold** words and a list:\n\n- one\n- two\n\n" +
			"<script>document.body.dataset.xss = 'script'</script>\n<img src=x onerror=\"document.body.dataset.xss = 'img'\">\n\n" +
			"<input type=text value=typed>\n\n[click](javascript:document.body.dataset.xss='link') and [the site](https://example.com/)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n",
		"docs/broken.md": "---\ntitle: [unclosed\n---\n# Broken front matter\n",
		"tasks.md":       "# Tasks\n\n- [x] first\n- [ ] second\n",
	}
	for p, content := range files {
		if _, err := c.store.Write(t.Context(), c.project.String(), p, []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	ctx := browse(t, 90*time.Second)
	guide := `#docs tr.doc-row[data-path="docs/guide.md"]`
	run(t, ctx, "refresh the documents", chromedp.Navigate(c.page()), visible(`body[data-project-conn="live"]`),
		click(`#tab-docs`), visible(`#docs-refresh`), click(`#docs-refresh`), visible(guide),
		visible(`#docs tr.doc-row.problem[data-path="docs/broken.md"] .doc-problem`),
		until(`document.getElementById("docs-status").textContent.startsWith("2 documents")`))
	var row []string
	eval(t, ctx, `[...document.querySelectorAll('`+guide+` td')].map(td => td.textContent)`, &row)
	if strings.Join(row, "|") != "The guidedocs/guide.md|guide|mandatory" {
		t.Errorf("the guide's row = %q", row)
	}
	run(t, ctx, "open the guide", click(guide), visible(`#doc-view.markdown h1`), visible(`#doc-view table`))
	var got struct {
		Bold, XSS, Items, First    string
		Scripts, Handlers, JSLinks int
		Rel                        string
	}
	eval(t, ctx, `(() => { const v = document.getElementById("doc-view"); return {
		bold: (v.querySelector("strong") || {}).textContent, xss: document.body.dataset.xss || "", first: v.firstElementChild.outerHTML,
		items: [...v.querySelectorAll("li")].map(li => li.textContent).join(","),
		scripts: v.querySelectorAll("script").length + v.querySelectorAll('input:not([type="checkbox"])').length, handlers: v.querySelectorAll("[onerror]").length,
		jSLinks: [...v.querySelectorAll("a")].filter(a => (a.getAttribute("href") || "").startsWith("javascript")).length,
		rel: (v.querySelector('a[href^="https://example.com"]') || {}).rel };
	})()`, &got)
	// The front matter is the index's, not shown.
	if got.First != "<h1>Guide</h1>" || got.Bold != "bold" || got.Items != "one,two" || got.XSS != "" || got.Scripts+got.Handlers+got.JSLinks != 0 || got.Rel != "noopener noreferrer" {
		t.Errorf("the rendered guide: %+v", got)
	}
	screenshot(t, ctx, "documents")
	run(t, ctx, "tasks.md in the Files tab", click(`#tab-files`), visible(`#files li.file-node[data-path="tasks.md"]`),
		click(`#files li.file-node[data-path="tasks.md"]`), visible(`#file-md.markdown h1`),
		until(`document.querySelectorAll('#file-md input[type="checkbox"][disabled]').length === 2`))
	screenshot(t, ctx, "tasks-md")
}
