package store

import (
	"strings"
	"unicode/utf8"
)

// pgText returns s as a Postgres text or jsonb value can hold it: s itself
// when it is valid UTF-8 without NUL, else s with its backslashes doubled,
// each NUL written \x00 and each byte that is not UTF-8 written \xNN, so
// that a dead letter of any message can be recorded (its raw bytes stay in
// the bytea message column).
func pgText(s string) string {
	if pgHolds(s) {
		return s
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1, r == 0:
			b.WriteString(`\x`)
			b.WriteByte(hex[s[i]>>4])
			b.WriteByte(hex[s[i]&0xf])
		case r == '\\':
			b.WriteString(`\\`)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// pgHolds reports whether Postgres text holds s as it is.
func pgHolds(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// pgTextMap is pgText of every key and value of m; m itself when none
// needs it.
func pgTextMap(m map[string]string) map[string]string {
	clean := true
	for k, v := range m {
		clean = clean && pgHolds(k) && pgHolds(v)
	}
	if clean {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[pgText(k)] = pgText(v)
	}
	return out
}
