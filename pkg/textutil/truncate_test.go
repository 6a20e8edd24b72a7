package textutil

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	cases := map[string]struct {
		s    string
		n    int
		want string
	}{
		"fits":                         {"abc", 3, "abc"},
		"empty":                        {"", 0, ""},
		"cut with the mark":            {"abcdef", 5, "ab…"},
		"never splits a rune":          {"aé€x", 5, "a…"}, // the cut at byte 2 lands inside é
		"keeps whole runes before it":  {"héllo wörld", 9, "héllo…"},
		"no room for the mark":         {"abcdef", 2, "ab"},
		"no room for the mark, a rune": {"éa", 1, ""},
		"zero":                         {"abc", 0, ""},
		"negative":                     {"abc", -1, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Truncate(tc.s, tc.n)
			if got != tc.want {
				t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
			if len(got) > max(tc.n, 0) && got != tc.s {
				t.Errorf("Truncate(%q, %d) = %q is %d bytes", tc.s, tc.n, got, len(got))
			}
		})
	}
}

func FuzzTruncate(f *testing.F) {
	f.Add("héllo wörld", 7)
	f.Add(strings.Repeat("€", 100), 2048)
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := Truncate(s, n)
		switch {
		case len(s) <= n && got != s:
			t.Fatalf("Truncate(%q, %d) = %q changed a string that fits", s, n, got)
		case len(s) > n && len(got) > max(n, 0):
			t.Fatalf("Truncate(%q, %d) = %q is %d bytes", s, n, got, len(got))
		case utf8.ValidString(s) && !utf8.ValidString(got):
			t.Fatalf("Truncate(%q, %d) = %q split a rune", s, n, got)
		}
	})
}
