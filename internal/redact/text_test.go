package redact_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/redact"
)

func TestText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		// Nothing to hide: unchanged.
		"The server had an error while processing your request.":                                 "The server had an error while processing your request.",
		"Rate limit reached for gpt-4o-mini on tokens per min (TPM): Limit 200000, Used 199000.": "Rate limit reached for gpt-4o-mini on tokens per min (TPM): Limit 200000, Used 199000.",
		"task-queue: risk-free ask-me":                                                           "task-queue: risk-free ask-me",
		"invalid model ID":                                                                       "invalid model ID",
		// Header lines a gateway's error page echoes.
		"<pre>Host: api\r\nAuthorization: Bearer sk-proj-AbCdEf0123456789\r\nAccept: */*</pre>": "<pre>Host: api  Authorization: xxxxx  Accept: */*</pre>",
		"authorization=Basic dXNlcjpwYXNz":                  "authorization=xxxxx",
		`{"headers":{"x-api-key":"abc123secret","a":"b"}}`:  `{"headers":{"x-api-key":"xxxxx","a":"b"}}`,
		"Cookie: session=0123456789abcdef; theme=dark":      "Cookie: xxxxx; theme=dark",
		"proxy-authorization: Digest username=u, nonce=abc": "proxy-authorization: xxxxx, nonce=abc",
		// A scheme and its credential anywhere.
		"sent Bearer abcdef.ghijk-lmnop to the gateway": "sent Bearer xxxxx to the gateway",
		"token 0123456789abcdef rejected":               "token xxxxx rejected",
		"token abcdefghij0123456789 rejected":           "token xxxxx rejected",
		"Enqueued token limit reached for gpt-4o-mini":  "Enqueued token limit reached for gpt-4o-mini",
		// Secret fields.
		`{"password":"hunter22","user":"u"}`:        `{"password":"xxxxx","user":"u"}`,
		"db error: password=hunter22 host=db":       "db error: password=xxxxx host=db",
		"api_key=AbC123&model=m":                    "api_key=xxxxx&model=m",
		`"client_secret": "s3cr3t-value"`:           `"client_secret": "xxxxx"`,
		"dial postgres://app:S3cret@db:5432/x: EOF": "dial postgres://app:xxxxx@db:5432/x: EOF",
		// Keys of well-known shapes, alone.
		"Incorrect API key provided: sk-abc123def456. You can find your key": "Incorrect API key provided: sk-xxxxx. You can find your key",
		"key sk-ant-api03-AbCdEfGhIjKl was revoked":                          "key sk-xxxxx was revoked",
		"slack xoxb-123456-abcdef failed":                                    "slack xoxb-xxxxx failed",
		"ghp_0123456789abcdefghij0123":                                       "ghp_xxxxx",
		"AKIAIOSFODNN7EXAMPLE denied":                                        "AKIAxxxxx denied",
		"jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sig-part rejected":     "jwt eyJxxxxx rejected",
		// Control characters and invalid UTF-8.
		"line one\nline two\ttab":                     "line one line two tab",
		"\x1b[2J\x1b[Hcleared":                        "[2J [Hcleared",
		"bad \xff\xfe bytes":                          "bad \uFFFD bytes",
		"forged\nlevel=ERROR msg=\"admin logged in\"": "forged level=ERROR msg=\"admin logged in\"",
		"nul\x00inside":                               "nul inside",
		"  padded  ":                                  "padded",
	} {
		require.Equal(t, want, redact.Text(in, 0), "%q", in)
	}
}

func TestTextBounds(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 2000) // 4000 bytes
	got := redact.Text(long, redact.ErrorMaxBytes)
	require.LessOrEqual(t, len(got), redact.ErrorMaxBytes)
	require.True(t, utf8.ValidString(got))
	require.True(t, strings.HasSuffix(got, redact.Truncated))
	require.Equal(t, "short", redact.Text("short", 10))
	require.Equal(t, "exactly10!", redact.Text("exactly10!", 10))
	require.Equal(t, "elev"+redact.Truncated, redact.Text("eleven char", 7))

	// A credential cut by the bound is not left half shown.
	page := strings.Repeat("x", 1000) + " Authorization: Bearer sk-" + strings.Repeat("A", 100)
	got = redact.Text(page, 1040)
	require.NotContains(t, got, "AAAA")
	// A megabyte costs what a few kilobytes do.
	huge := strings.Repeat("Authorization: Bearer sk-abcdef0123456789\n", 50000)
	got = redact.Text(huge, redact.ErrorMaxBytes)
	require.LessOrEqual(t, len(got), redact.ErrorMaxBytes)
	require.NotContains(t, got, "abcdef")
}

func FuzzText(f *testing.F) {
	f.Add("Authorization: Bearer sk-abc123def456", 64)
	f.Add("\xff\x00\x1b", 3)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = n % 4096
		got := redact.Text(s, n)
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8 from %q", s)
		}
		if n > 0 && len(got) > n {
			t.Fatalf("%d bytes over the bound %d", len(got), n)
		}
		for _, r := range got {
			if r < 0x20 || r == 0x7f {
				t.Fatalf("control character in %q", got)
			}
		}
	})
}
