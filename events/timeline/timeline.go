// Package timeline is the Activity Timeline page served by agentworker at
// "/": plain HTML, CSS and a JavaScript module embedded in the binary (no
// CDN, no build step). It submits a task through the SSE gateway and
// follows it with EventSource: stage and iteration progress, a timeline of
// phases, tool calls, self-repair attempts and errors, streamed model text,
// and a file tree kept in sync from file_update events.
package timeline

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
		h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
