// Package redact masks secrets in text before it leaves the process: API
// keys (sk-…, AKIA…, ghp_…, AIza…, xox…), bearer and basic credentials,
// JWTs, passwords in URLs and DSNs, private key blocks, and the values of
// keys named like secrets (password=, "api_key": …, token: …).
//
// Every writer applies it: events.Recorder (every event payload), the task
// runner's error path (ai_tasks.error, task_runs.error_message), the slog
// handler of the binary (Handler), and HTTP error bodies.
package redact

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
)

// Mask replaces every secret.
const Mask = "[REDACTED]"

// secretKey matches names whose value is a secret.
const secretKey = `(?:api[_-]?key|apikey|access[_-]?key(?:[_-]?id)?|secret[_-]?(?:access[_-]?)?key|client[_-]?secret|` +
	`secret|passw(?:or)?d|pwd|(?:access|refresh|id|auth|session|bearer)[_-]?token|token|authorization|x[_-]api[_-]key|private[_-]?key|credentials?)`

var rules = []struct {
	re   *regexp.Regexp
	repl string
}{
	// Private key blocks, whole.
	{regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)`), Mask},
	// JWTs (header.payload[.signature]).
	{regexp.MustCompile(`eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}(?:\.[A-Za-z0-9_-]*)?`), Mask},
	// Provider keys with a recognisable shape.
	{regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{8,}`), Mask},
	{regexp.MustCompile(`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`), Mask},
	{regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{20,}`), Mask},
	{regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{20,}`), Mask},
	{regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}`), Mask},
	{regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{30,}`), Mask},
	// Authorization headers, whatever the scheme, and bearer tokens anywhere.
	{regexp.MustCompile(`(?i)(\bauthorization\b["']?\s*[:=]\s*["']?)(?:[A-Za-z]+\s+)?[^\s"'&,;}]+`), "${1}" + Mask},
	{regexp.MustCompile(`(?i)\b(bearer)(\s+)[A-Za-z0-9._~+/=-]{8,}`), "${1}${2}" + Mask},
	// user:password@ in URLs and DSNs.
	{regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@`), "${1}" + Mask + "@"},
	// key=value, key: value, "key": "value" for secret-looking keys.
	{regexp.MustCompile(`(?i)((?:^|[^a-z0-9])` + secretKey + `\b["']?\s*[:=]\s*["']?)([^\s"'&,;}]+)`), "${1}" + Mask},
}

// triggers are lowercase fragments at least one of which every rule's match
// contains. Text without any is returned as is, without running the rules:
// most event payloads hold no secret, and every payload is redacted.
var triggers = []string{"-----begin", "eyj", "sk-", "akia", "asia", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "aiza",
	"authorization", "bearer", "://", "key", "token", "secret", "passw", "pwd", "credential"}

// suspicious reports whether s contains a trigger, ignoring case. A JSON
// \u escape could spell a trigger in disguise, so it counts as one.
func suspicious(s string) bool {
	lower := strings.ToLower(s)
	for _, t := range triggers {
		if strings.Contains(lower, t) {
			return true
		}
	}
	return strings.Contains(s, `\u`)
}

// String returns s with every secret masked. It is idempotent.
func String(s string) string {
	if !suspicious(s) {
		return s
	}
	return applyRules(s)
}

func applyRules(s string) string {
	for _, r := range rules {
		s = r.re.ReplaceAllString(s, r.repl)
	}
	return s
}

// Redactor masks, besides the patterns of String, the exact secret values it
// was given (the configured API key, the storage secret, the database password).
type Redactor struct {
	secrets *strings.Replacer
}

// New returns a Redactor for these literal secrets; empty and very short
// values (under 6 bytes, too likely to match ordinary text) are ignored.
func New(secrets ...string) *Redactor {
	var pairs []string
	for _, s := range secrets {
		if len(s) >= 6 {
			pairs = append(pairs, s, Mask)
		}
	}
	return &Redactor{secrets: strings.NewReplacer(pairs...)}
}

// String masks the literal secrets, then the patterns.
func (r *Redactor) String(s string) string {
	if r != nil && r.secrets != nil {
		s = r.secrets.Replace(s)
	}
	return String(s)
}

var secretKeyName = regexp.MustCompile(`(?i)^(?:` + secretKey + `)$`)

// JSON masks the secrets in a JSON document: every string is redacted, and
// the value of a key named like a secret ("password", "apiKey") is masked
// whole. It returns valid JSON for valid JSON; anything else is redacted as
// text.
func JSON(raw []byte) []byte {
	// Keys and strings are all in raw: with no trigger anywhere there is
	// nothing to mask, and no need to decode.
	if !suspicious(string(raw)) {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return []byte(String(string(raw)))
	}
	out, err := json.Marshal(redactValue(v))
	if err != nil {
		return []byte(String(string(raw)))
	}
	return out
}

func redactValue(v any) any {
	switch x := v.(type) {
	case string:
		return String(x)
	case []any:
		for i := range x {
			x[i] = redactValue(x[i])
		}
		return x
	case map[string]any:
		for k, val := range x {
			if _, isString := val.(string); isString && secretKeyName.MatchString(strings.ReplaceAll(k, "-", "_")) {
				x[k] = Mask
				continue
			}
			x[k] = redactValue(val)
		}
		return x
	}
	return v
}
