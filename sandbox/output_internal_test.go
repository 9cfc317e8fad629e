package sandbox

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCaptureKeepsHeadAndTail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		writes     []string
		limit      int
		head, tail int
		want       string
	}{
		{"AllKept", []string{"a\n", "b\n"}, 100, 10, 10, "a\nb\n"},
		{"ShortButOverTheView", []string{"0123456789", "abcdefghij"}, 100, 3, 4,
			"012\n[… 13 bytes (0 lines) cut from the middle of 20 bytes of output: the first 3 and the last 4 bytes are shown …]\nghij"},
		{"MiddleDropped", []string{"head\n", strings.Repeat("x\n", 50), "tail\n"}, 20, 10, 10,
			"head\nx\nx\nx\n[… 90 bytes (45 lines) cut from the middle of 110 bytes of output: the first 10 and the last 10 bytes are shown …]\n\nx\nx\ntail\n"},
		{"ViewSpansHeadAndTail", []string{"abcdef", "ghij"}, 10, 2, 6, "ab\n[… 2 bytes (0 lines) cut from the middle of 10 bytes of output: the first 2 and the last 6 bytes are shown …]\nefghij"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCapture(tc.limit)
			for _, w := range tc.writes {
				if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("write: %d, %v", n, err)
				}
			}
			if got := c.output().Text(tc.head, tc.tail); got != tc.want {
				t.Errorf("Text(%d, %d) =\n%q\nwant\n%q", tc.head, tc.tail, got, tc.want)
			}
		})
	}
}

func TestTextCutsOnCharacterBoundaries(t *testing.T) {
	t.Parallel()
	c := newCapture(1 << 10)
	c.Write([]byte(strings.Repeat("é", 100)))
	got := c.output().Text(5, 5)
	if !utf8.ValidString(got) || !strings.HasPrefix(got, "éé\n") || !strings.HasSuffix(got, "\néé") {
		t.Errorf("Text = %q", got)
	}
}
