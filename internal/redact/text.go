package redact

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrorMaxBytes bounds an error message that llmq stores or shows: an
// upstream's error text, a dead letter's last error. A gateway's error page
// can be megabytes; the first kilobyte says what went wrong.
const ErrorMaxBytes = 1024

// Truncated ends a text that Text cut short.
const Truncated = "…"

// secretPatterns find credentials in free text: what an upstream's error
// page may echo (its request headers, a connection string), and the shapes
// of the common keys. Each keeps its first group (the name) and masks the
// rest of the match.
var secretPatterns = []*regexp.Regexp{
	// Header lines that carry a credential, to the end of the value
	// ("Authorization: Bearer ...", "x-api-key: ...", "Cookie: ...").
	regexp.MustCompile(`(?i)((?:proxy-)?authorization|x-api-key|api-key|x-goog-api-key|cookie|set-cookie)` +
		`(["']?\s*[:=]\s*["']?)[^"'\r\n&,;}<>]+`),
	// Fields that name a secret, to the next space or delimiter
	// ("password=...", "\"api_key\": \"...\"").
	regexp.MustCompile(`(?i)(password|passwd|pwd|secret|client_secret|token|access_token|refresh_token|id_token|api_key|apikey)` +
		`(["']?\s*[:=]\s*["']?)[^\s"'&,;}<>]+`),
	// An authentication scheme and its credential, wherever it appears; a
	// token's has a digit ("Enqueued token limit reached" is prose).
	regexp.MustCompile(`(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{4,}`),
	regexp.MustCompile(`(?i)\b(token)(\s+)[A-Za-z._~+/=-]*[0-9][A-Za-z0-9._~+/=-]*`),
}

// urlPassword finds the password of a URL's user information.
var urlPassword = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://[^\s/:@]*:)[^\s/@]+@`)

// keyPatterns are the shapes of well-known API keys, masked whole but for
// their prefix: OpenAI (sk-..., sk-proj-...), Anthropic (sk-ant-...),
// Slack (xox?-...), GitHub (ghp_...), AWS access key ids and JSON Web
// Tokens.
var keyPatterns = []*regexp.Regexp{
	regexp.MustCompile(`\b(sk-)[A-Za-z0-9_-]{6,}`),
	regexp.MustCompile(`\b(xox[abprs]-)[A-Za-z0-9-]{6,}`),
	regexp.MustCompile(`\b(gh[pousr]_)[A-Za-z0-9]{10,}`),
	regexp.MustCompile(`\b(A[KS]IA)[0-9A-Z]{16}\b`),
	regexp.MustCompile(`\b(eyJ)[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`),
}

// Text returns s fit to be stored and shown to a tenant or an operator:
// credentials masked (header lines such as Authorization, bearer tokens,
// secret fields, URL passwords, keys of well-known shapes), control
// characters and invalid UTF-8 replaced by a space or U+FFFD (nothing can
// move a terminal's cursor or forge a log line), and cut to at most maxBytes
// bytes on a rune boundary, ending with Truncated when cut (maxBytes <= 0:
// no bound).
//
// It is for text that may hold anything (an upstream's error body); URLs
// that llmq itself prints go through URL.
func Text(s string, maxBytes int) string {
	// Bound the work first: the patterns never need more than the kept
	// text and a credential's length beyond it.
	if maxBytes > 0 && len(s) > 2*maxBytes+256 {
		s = s[:2*maxBytes+256]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	for _, re := range secretPatterns {
		s = re.ReplaceAllString(s, "${1}${2}"+Mask)
	}
	s = urlPassword.ReplaceAllString(s, "${1}"+Mask+"@")
	for _, re := range keyPatterns {
		s = re.ReplaceAllString(s, "${1}"+Mask)
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if maxBytes <= 0 || len(s) <= maxBytes {
		return s
	}
	mark := Truncated
	if maxBytes < 2*len(mark) {
		mark = "" // no room to say it
	}
	cut := maxBytes - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
