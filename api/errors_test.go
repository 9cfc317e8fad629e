package api

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/redact"
)

// Every HTTP error body is redacted.
func TestErrorBodyRedacted(t *testing.T) {
	t.Parallel()
	for _, c := range redact.Corpus {
		w := httptest.NewRecorder()
		writeError(w, 500, CodeInternal, "upstream said: "+c.Text)
		if strings.Contains(w.Body.String(), c.Secret) {
			t.Errorf("%s: body %s carries the secret", c.Name, w.Body.String())
		}
	}
}
