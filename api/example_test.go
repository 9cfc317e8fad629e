package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/agentworker/agentworker/api"
)

// RequireToken guards a handler outside /v1, as agentworker serve guards
// /metrics with METRICS_TOKEN.
func ExampleRequireToken() {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "agentworker_queue_depth 0\n") })
	h := api.RequireToken("scrape-secret", metrics)

	for _, header := range []string{"", "Bearer scrape-secret"} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		fmt.Print(w.Code, " ", w.Body.String())
	}
	// Output:
	// 401 {"error":{"code":"UNAUTHORIZED","message":"unauthorized"}}
	// 200 agentworker_queue_depth 0
}
