package tokencount

// The split patterns of the encodings, as the codec compiles them:
//
//	o200k:  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	       |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	       |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//	cl100k: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// The first alternative that matches takes the text; the ASCII classes
// (and DEL, which no alternative matches): internal/tokencount/doc.go.

func isUpper(c byte) bool  { return 'A' <= c && c <= 'Z' }
func isLower(c byte) bool  { return 'a' <= c && c <= 'z' }
func isLetter(c byte) bool { return isUpper(c) || isLower(c) }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isSpace(c byte) bool  { return c == ' ' || '\t' <= c && c <= '\r' }
func isOther(c byte) bool  { return c != del && !isSpace(c) && !isLetter(c) && !isDigit(c) }

const del = 0x7f

// isPrefix is [^\r\n\p{L}\p{N}], the one byte a word may carry before it.
func isPrefix(c byte) bool { return c != '\r' && c != '\n' && c != del && !isLetter(c) && !isDigit(c) }

// run returns how many bytes of s from i on satisfy in, from i.
func run(s string, i int, in func(byte) bool) int {
	j := i
	for j < len(s) && in(s[j]) {
		j++
	}
	return j - i
}

// contraction returns the length of (?i:'s|'t|'re|'ve|'m|'ll|'d) at the
// start of s, 0 when none is.
func contraction(s string) int {
	if len(s) < 2 || s[0] != '\'' {
		return 0
	}
	switch s[1] | 0x20 { // ASCII lower case
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if len(s) > 2 && s[2]|0x20 == 'e' {
			return 3
		}
	case 'l':
		if len(s) > 2 && s[2]|0x20 == 'l' {
			return 3
		}
	}
	return 0
}

// spaces returns the length of the match of \s*[\r\n]+|\s+(?!\S)|\s+ at the
// start of s, 0 when s[0] is not a space.
func spaces(s string) int {
	e := run(s, 0, isSpace)
	// \s*[\r\n]+: up to the last line break of the run.
	for i := e - 1; i >= 0; i-- {
		if s[i] == '\r' || s[i] == '\n' {
			return i + 1
		}
	}
	// \s+(?!\S): the run, less its last space when a non-space follows
	// (that space then goes with what follows); \s+: a single space.
	if e < len(s) && e > 1 {
		return e - 1
	}
	return e
}

// o200kPiece returns the length of the first piece of s (non-empty ASCII)
// under o200k's pattern, 0 when none starts at s[0] (a DEL).
func o200kPiece(s string) int {
	// The two word alternatives: an optional prefix byte, then upper case
	// letters followed by lower case ones, at least one letter in all
	// (U*L+ when there is a lower case letter, U+L* when not); on ASCII
	// no letter is in both classes, so no backtracking changes the run.
	j := 0
	if isPrefix(s[0]) {
		j = 1
	}
	if u := run(s, j, isUpper); u+run(s, j+u, isLower) > 0 {
		end := j + u + run(s, j+u, isLower)
		return end + contraction(s[end:])
	}
	if isDigit(s[0]) {
		return min(3, run(s, 0, isDigit))
	}
	if n := others(s, func(c byte) bool { return c == '\r' || c == '\n' || c == '/' }); n > 0 {
		return n
	}
	return spaces(s)
}

// cl100kPiece returns the length of the first piece of s (non-empty ASCII)
// under cl100k's pattern, 0 when none starts at s[0] (a DEL).
func cl100kPiece(s string) int {
	if n := contraction(s); n > 0 {
		return n
	}
	j := 0
	if isPrefix(s[0]) {
		j = 1
	}
	if n := run(s, j, isLetter); n > 0 {
		return j + n
	}
	if isDigit(s[0]) {
		return min(3, run(s, 0, isDigit))
	}
	if n := others(s, func(c byte) bool { return c == '\r' || c == '\n' }); n > 0 {
		return n
	}
	return spaces(s)
}

// others returns the length of the match of " ?[^\s\p{L}\p{N}]+" then
// tail* at the start of s, 0 when it does not match.
func others(s string, tail func(byte) bool) int {
	j := 0
	if s[0] == ' ' {
		j = 1
	}
	n := run(s, j, isOther)
	if n == 0 {
		return 0
	}
	return j + n + run(s, j+n, tail)
}
