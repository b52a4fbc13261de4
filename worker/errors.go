package worker

import "fmt"

// ResponseTooLargeError is an upstream answer whose body passed
// UpstreamConfig.MaxResponseBytes: Classify makes it a permanent failure
// with code CodeResponseTooLarge, never retried (another call would be as
// large, and billed again).
type ResponseTooLargeError struct {
	// Status is the answer's HTTP status.
	Status int
	// Limit is the bound it passed, in bytes.
	Limit int64
}

func (e *ResponseTooLargeError) Error() string {
	return fmt.Sprintf("the upstream's answer (HTTP %d) is larger than the limit of %d bytes (upstream.max_response_bytes)", e.Status, e.Limit)
}

// CodeResponseTooLarge is the error code of a job whose answer was larger
// than UpstreamConfig.MaxResponseBytes.
const CodeResponseTooLarge = "response_too_large"
