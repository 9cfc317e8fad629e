// Package console is the console served by agentworker at "/": plain
// HTML, CSS and JavaScript modules embedded in the binary (no CDN, no build
// step). For a project and its bearer token it lists the tasks, live from
// the project's event stream; follows a task's own stream (stage and
// iteration progress, a timeline of phases, tool calls, self-repair and
// errors, streamed model text, the files it touched); shows its result,
// error and the diff of its changes (line numbers on both sides, review
// comments at their line); steers it (cancel, pause, resume,
// retry, answering its question); shows the project's files, inbox and
// usage, and its runs per day by status as a chart (an inline SVG drawn by
// runs.js) with their tokens, cost, durations and rate-limit waits; draws the tasks as a board by status with their agent, priority and
// dependencies; creates tasks with an agent, a priority and dependencies; and
// lists and edits the project's agents; lists the project's documents and
// renders Markdown (documents, tasks.md) for reading. Everything it shows is
// read from the /v1 API and set as text, never as HTML, but Markdown: marked
// (MIT) renders it and DOMPurify (Apache-2.0) keeps only safe HTML of it,
// both vendored as files under static/vendor.
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the page and its assets.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Never framed: a page of another origin could otherwise lay the
		// console, with its stored token, under its own clicks.
		h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
