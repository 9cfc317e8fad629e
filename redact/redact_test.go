package redact_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentworker/agentworker/redact"
)

// Corpus is every secret shape the writers must never let through, each in
// the context it typically appears in. Tests of the writers (events, the
// runner, the HTTP API) reuse it through redact.Corpus.
func TestCorpus(t *testing.T) {
	t.Parallel()
	for _, c := range redact.Corpus {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			got := redact.String(c.Text)
			if strings.Contains(got, c.Secret) {
				t.Errorf("String(%q) = %q: secret %q still there", c.Text, got, c.Secret)
			}
			if !strings.Contains(got, redact.Mask) {
				t.Errorf("String(%q) = %q: nothing masked", c.Text, got)
			}
			if again := redact.String(got); again != got {
				t.Errorf("not idempotent: %q then %q", got, again)
			}
			doc, _ := json.Marshal(map[string]any{"message": c.Text, "nested": []any{map[string]string{"detail": c.Text}}})
			if out := redact.JSON(doc); bytes.Contains(out, []byte(c.Secret)) || !json.Valid(out) {
				t.Errorf("JSON(%s) = %s", doc, out)
			}
		})
	}
}

func TestKeepsOrdinaryText(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"created hello.txt saying hi",
		"the model used 1200 promptTokens and 80 completionTokens",
		"max tokens: 4096",
		"tests pass: 5 of 5",
		"read_file src/auth/login.go lines 1-40",
		"https://example.com/docs?page=2",
		`{"path":"src/main.go","content":"package main"}`,
	} {
		if got := redact.String(s); got != s {
			t.Errorf("String(%q) = %q, want it unchanged", s, got)
		}
	}
}

func TestJSONSecretKeys(t *testing.T) {
	t.Parallel()
	in := `{"apiKey":"abc123456","password":"hunter22","nested":{"client_secret":"zzz999999"},"tokens":12,"promptTokens":3,"path":"a.go"}`
	out := string(redact.JSON([]byte(in)))
	for _, s := range []string{"abc123456", "hunter22", "zzz999999"} {
		if strings.Contains(out, s) {
			t.Errorf("JSON = %s: %q not masked", out, s)
		}
	}
	if !strings.Contains(out, `"tokens":12`) || !strings.Contains(out, `"path":"a.go"`) {
		t.Errorf("JSON = %s: ordinary fields changed", out)
	}
}

func TestRedactorLiteralSecrets(t *testing.T) {
	t.Parallel()
	r := redact.New("plain-db-pass-77", "", "abc")
	if got := r.String("connect failed with plain-db-pass-77 to db; abc"); strings.Contains(got, "plain-db-pass-77") || !strings.Contains(got, "abc") {
		t.Errorf("got %q", got)
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	for _, c := range redact.Corpus {
		var buf bytes.Buffer
		log := slog.New(redact.NewHandler(slog.NewJSONHandler(&buf, nil), nil))
		log.With(slog.String("dsn", c.Text)).Info("failed: "+c.Text, slog.String("err", c.Text),
			slog.Any("cause", errString(c.Text)), slog.Group("g", slog.String("x", c.Text)))
		if strings.Contains(buf.String(), c.Secret) {
			t.Errorf("%s: log line %s carries the secret", c.Name, buf.String())
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// FuzzString: redaction is idempotent, keeps valid UTF-8 valid, and a key
// made of any fuzzed characters never survives in its usual places.
func FuzzString(f *testing.F) {
	for _, c := range redact.Corpus {
		f.Add(c.Text, c.Secret)
	}
	f.Add("hello", "abcdefgh12345678")
	f.Fuzz(func(t *testing.T, text, key string) {
		got := redact.String(text)
		if redact.String(got) != got {
			t.Fatalf("not idempotent on %q: %q", text, got)
		}
		if utf8.ValidString(text) && !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8 out of %q", text)
		}
		key = alnum(key)
		if len(key) < 20 || strings.Contains(text, key) {
			return
		}
		for _, embed := range []string{
			text + " sk-" + key + " " + text,
			text + " Authorization: Bearer " + key,
			text + " postgres://app:" + key + "@db:5432/app",
			text + ` {"password": "` + key + `"}`,
			text + " api_key=" + key + "&x=1",
		} {
			if out := redact.String(embed); strings.Contains(out, key) {
				t.Fatalf("String(%q) = %q keeps the key", embed, out)
			}
		}
		doc, _ := json.Marshal(map[string]string{"m": text + " sk-" + key, "token": key})
		if out := redact.JSON(doc); bytes.Contains(out, []byte(key)) || !json.Valid(out) {
			t.Fatalf("JSON(%s) = %s", doc, out)
		}
	})
}

func alnum(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// The trigger pre-check never changes the result: text it lets through
// untouched is text the rules would not change.
func FuzzTriggersAreSound(f *testing.F) {
	for _, c := range redact.Corpus {
		f.Add(c.Text)
	}
	f.Add(`{"kind":"stage_enter","stage":"claim"}`)
	f.Add("Authorization: Basic dXNlcjpzM2NyZXRwYXNz")
	f.Fuzz(func(t *testing.T, text string) {
		if got, want := redact.String(text), redact.ApplyRulesForTest(text); got != want {
			t.Fatalf("String(%q) = %q, the rules give %q", text, got, want)
		}
	})
}
