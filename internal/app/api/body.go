package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/jsonlimit"
)

// valueSlack is what a value may exceed the job limit by before reading
// stops: the decoder reads ahead, and a job's JSON may be indented.
const valueSlack = 64 << 10

// admission reads and checks the jobs of a request, for POST /v1/jobs and
// the gateway alike: the body within its limits, each job against the
// catalog, the tenants and their budgets.
type admission struct {
	replies
	// maxBodyBytes and maxMessageBytes are Config's.
	maxBodyBytes    int64
	maxMessageBytes int
	// usage reads the budgets (Config.Usage; nil: none is checked).
	usage UsageStore
	// tenants and catalog are those applied now (API.tenants, API.catalog).
	tenants func() llmq.Tenants
	catalog func() llmq.Catalog
	clock   clockwork.Clock
}

// jsonLimits bounds a request body's keys, strings and nesting while it
// streams in (a batch nests its jobs two levels down); llmq.Decode then
// checks each job exactly.
func (ad *admission) jsonLimits() jsonlimit.Limits {
	return jsonlimit.Limits{MaxKeyBytes: llmq.MaxKeyBytes, MaxStringBytes: max(ad.maxMessageBytes, 0),
		MaxDepth: llmq.MaxDepth + 2}
}

// shapeError answers JSON past a jsonlimit bound, or returns nil.
func shapeError(err error, field string) *Error {
	var le *jsonlimit.Error
	if !errors.As(err, &le) {
		return nil
	}
	code := llmq.CodeTooLarge
	if le.What == jsonlimit.Depth {
		code = llmq.CodeInvalidJSON
	}
	return &Error{Code: code, Field: field, Message: le.Error()}
}

// readBody reads a POST /v1/jobs body as a stream: one job, or
// {"jobs": [...]}. It never holds more than the jobs it accepts: it stops
// at the 1,001st element of "jobs", at any value larger than a job may
// be and at a key, string or nesting past jsonLimits, without reading the
// rest of the body. It returns the raw jobs and whether the body was a
// batch.
func (ad *admission) readBody(body io.Reader) ([]json.RawMessage, bool, *Error) {
	cr := &capReader{r: body, limit: -1}
	dec := json.NewDecoder(jsonlimit.NewReader(cr, ad.jsonLimits()))
	// capNext bounds the next value to what one job may be.
	capNext := func() {
		if ad.maxMessageBytes > 0 {
			cr.limit = cr.n + int64(ad.maxMessageBytes) + valueSlack
		}
	}
	fail := ad.bodyError

	tok, err := dec.Token()
	switch {
	case errors.Is(err, io.EOF):
		return nil, false, &Error{Code: llmq.CodeInvalidJSON, Message: "request body is empty: send a job or {\"jobs\": [...]}"}
	case err != nil:
		return nil, false, fail(err, "")
	case tok != json.Delim('{'):
		return nil, false, &Error{Code: llmq.CodeInvalidJSON, Message: "request body is not a JSON object"}
	}
	var (
		fields  []byte // the single job's members, re-encoded
		jobs    []json.RawMessage
		isBatch bool
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false, fail(err, "")
		}
		key, _ := tok.(string)
		if key != "jobs" {
			capNext()
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return nil, false, fail(err, "")
			}
			cr.limit = -1
			if ad.maxMessageBytes > 0 && len(fields)+len(v) > ad.maxMessageBytes {
				return nil, false, fail(errValueTooLarge, "")
			}
			k, _ := json.Marshal(key)
			if len(fields) > 0 {
				fields = append(fields, ',')
			}
			fields = append(append(append(fields, k...), ':'), v...)
			continue
		}
		isBatch = true
		var e *Error
		if jobs, e = ad.readJobs(dec, cr, capNext, fail); e != nil {
			return nil, true, e
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, isBatch, fail(err, "")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, isBatch, &Error{Code: llmq.CodeInvalidJSON, Message: "request body has data after its JSON object"}
	}
	if !isBatch {
		return []json.RawMessage{append(append([]byte{'{'}, fields...), '}')}, false, nil
	}
	return jobs, true, nil
}

// bodyError is the answer to err met reading the body at field ("" for
// the body itself): too large, cut short, or not JSON.
func (ad *admission) bodyError(err error, field string) *Error {
	var tooBig *http.MaxBytesError
	if e := shapeError(err, field); e != nil {
		return e
	}
	switch {
	case errors.As(err, &tooBig):
		return &Error{Code: llmq.CodeTooLarge, Message: fmt.Sprintf("request body is over the %d byte limit", ad.maxBodyBytes)}
	case errors.Is(err, errValueTooLarge):
		what := "the job"
		if field != "" {
			what = field
		}
		return &Error{Code: llmq.CodeTooLarge, Field: field,
			Message: fmt.Sprintf("%s is over the %d byte limit of a job", what, ad.maxMessageBytes)}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Code: llmq.CodeInvalidJSON, Field: field, Message: "request body ends before its JSON does"}
	}
	return &Error{Code: llmq.CodeInvalidJSON, Field: field, Message: "request body is not valid JSON: " + err.Error()}
}

// readJobs reads the array of "jobs", each element bounded, stopping at
// the first element past MaxBatch.
func (ad *admission) readJobs(dec *json.Decoder, cr *capReader, capNext func(), fail func(error, string) *Error) ([]json.RawMessage, *Error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, fail(err, "jobs")
	}
	if tok != json.Delim('[') {
		return nil, &Error{Code: llmq.CodeInvalidType, Field: "jobs", Message: "must be an array of jobs"}
	}
	jobs := []json.RawMessage{}
	for dec.More() {
		if len(jobs) == MaxBatch {
			return nil, &Error{Code: CodeTooManyJobs, Field: "jobs",
				Message: fmt.Sprintf("has more than %d jobs, the most accepted per request", MaxBatch)}
		}
		field := fmt.Sprintf("jobs[%d]", len(jobs))
		capNext()
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fail(err, field)
		}
		cr.limit = -1
		jobs = append(jobs, bytes.TrimSpace(v))
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return nil, fail(err, "jobs")
	}
	if len(jobs) == 0 {
		return nil, &Error{Code: llmq.CodeInvalidValue, Field: "jobs", Message: "must not be empty"}
	}
	return jobs, nil
}

// errValueTooLarge: one value of the body is larger than a job may be.
var errValueTooLarge = errors.New("value over the job size limit")

// capReader counts the bytes read and, while limit is not negative, fails
// a read that would pass it.
type capReader struct {
	r     io.Reader
	n     int64
	limit int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.limit >= 0 {
		if c.n >= c.limit {
			return 0, errValueTooLarge
		}
		p = p[:min(int64(len(p)), c.limit-c.n)]
	}
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}

// jsonContent reports whether r's body is declared JSON; if not, it
// answers 415.
func jsonContent(w http.ResponseWriter, r *http.Request) bool {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, Error{Code: CodeUnsupportedMedia, Message: "Content-Type must be application/json"})
		return false
	}
	return true
}
