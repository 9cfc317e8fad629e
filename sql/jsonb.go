package sql

import (
	"bytes"
	"strings"
)

// JSONB makes encoded JSON storable as jsonb: Postgres refuses the escape
// \u0000 in jsonb strings (unsupported Unicode escape sequence), which
// model output and file contents may hold. Each is replaced by \ufffd, the
// replacement character; everything else is kept byte for byte.
func JSONB(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u0000`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		// An escape: \u0000 is replaced; any other (\\ included) is copied whole.
		if b[i+1] == 'u' && i+6 <= len(b) && string(b[i+2:i+6]) == "0000" {
			out = append(out, `\ufffd`...)
			i += 5
			continue
		}
		out = append(out, b[i], b[i+1])
		i++
	}
	return out
}

// Text makes a string storable in a text column, which refuses NUL bytes.
func Text(s string) string {
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}
