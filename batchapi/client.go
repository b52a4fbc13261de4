package batchapi

import (
	"cmp"
	"io"
	"net/http"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/llmq/llmq/internal/redact"
)

// MaxAnswerBytesDefault bounds the body of one answer of the provider's
// Batch and Files API other than a file's content (a batch, an uploaded
// file's record, an error), success or error: a batch is a few kilobytes;
// 8 MiB leaves room for its errors, one per line of 50,000.
const MaxAnswerBytesDefault = 8 << 20

// NewClient returns a client of the provider's Batch and Files API at cc
// whose answers, success or error, are read up to maxBytes (0 =
// MaxAnswerBytesDefault, -1 = no bound): past it the call fails with an
// *AnswerTooLargeError, so go-openai, which reads answers whole, never
// holds more. A file's content (a batch's output, read line by line under
// maxLineBytes) is streamed unbounded.
func NewClient(cc openai.ClientConfig, maxBytes int64) *openai.Client {
	cc.HTTPClient = boundedDoer{d: cmp.Or[openai.HTTPDoer](cc.HTTPClient, http.DefaultClient),
		limit: cmp.Or(maxBytes, MaxAnswerBytesDefault)}
	return openai.NewClientWithConfig(cc)
}

// boundedDoer bounds the answers of d but file contents.
type boundedDoer struct {
	d     openai.HTTPDoer
	limit int64
}

func (b boundedDoer) Do(r *http.Request) (*http.Response, error) {
	resp, err := b.d.Do(r)
	if err != nil || b.limit < 0 || strings.HasSuffix(r.URL.Path, "/content") {
		return resp, err
	}
	resp.Body = &answerReader{ReadCloser: resp.Body, limit: b.limit}
	return resp, nil
}

// answerReader reads up to limit bytes, then fails: a body cut short must
// not pass for a whole one. It reads one byte past the limit to tell a body
// of exactly limit bytes from a larger one.
type answerReader struct {
	io.ReadCloser
	limit, read int64
}

func (a *answerReader) Read(p []byte) (int, error) {
	if a.read > a.limit {
		return 0, &AnswerTooLargeError{Limit: a.limit}
	}
	if room := a.limit + 1 - a.read; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := a.ReadCloser.Read(p)
	a.read += int64(n)
	if a.read > a.limit {
		return n - int(a.read-a.limit), &AnswerTooLargeError{Limit: a.limit}
	}
	return n, err
}

// providerError is an error of a call to the provider, its text redacted
// and bounded (redact.Text): the provider's error message may echo
// anything, at any length, and is logged and stored. errors.Is and
// errors.As see the error itself.
type providerError struct{ err error }

func (e providerError) Error() string { return redact.Text(e.err.Error(), redact.ErrorMaxBytes) }

func (e providerError) Unwrap() error { return e.err }
