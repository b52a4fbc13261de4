package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/shaping"
)

// Class is what an upstream outcome means for the job. Errors are classified
// once, here, and the class (not strings) is carried through the worker.
type Class int

const (
	// ClassSuccess: a 2xx with a completion.
	ClassSuccess Class = iota
	// ClassRateLimited: a 429 that asks the client to slow down (RPM, TPM,
	// slow_down, DashScope limit_requests/limit_burst_rate and its TPM
	// insufficient_quota). Retryable; after the primary's retries, a fallback
	// model may take over.
	ClassRateLimited
	// ClassRetryable: 5xx, 408, 409, timeouts and connection resets.
	// Retryable on the same model; never a reason to fall back.
	ClassRetryable
	// ClassPermanent: 400, 401, 403, 404, OpenAI insufficient_quota and
	// anything else that retrying cannot fix.
	ClassPermanent
)

func (c Class) String() string {
	switch c {
	case ClassSuccess:
		return "success"
	case ClassRateLimited:
		return "rate_limited"
	case ClassRetryable:
		return "retryable"
	case ClassPermanent:
		return "permanent"
	}
	return "unknown(" + strconv.Itoa(int(c)) + ")"
}

// Provider selects the error dialect of the upstream.
type Provider string

// ParseProvider returns the named provider: openai or dashscope.
func ParseProvider(s string) (Provider, error) {
	switch p := Provider(s); p {
	case ProviderOpenAI, ProviderDashScope:
		return p, nil
	}
	return "", fmt.Errorf("worker: unknown provider %q (want openai or dashscope)", s)
}

const (
	// ProviderOpenAI: insufficient_quota means billing and is permanent.
	ProviderOpenAI Provider = "openai"
	// ProviderDashScope: insufficient_quota means TPM throttling and is
	// retryable.
	ProviderDashScope Provider = "dashscope"
)

// Outcome is the classified result of one upstream call.
type Outcome struct {
	Class Class
	// Status is the HTTP status, 0 when no response arrived.
	Status int
	// Code is the upstream error code ("rate_limit_exceeded",
	// "server_error", ...) or a transport code ("timeout", "connection_reset"),
	// at most codeMaxBytes.
	Code string
	// Message is the upstream error message, for the job row and the dead
	// letter: prefixed with the status ("HTTP 502: ..."), sanitised and
	// bounded (redact.Text; with Code, "code: message" fits
	// redact.ErrorMaxBytes), so a gateway's error page that echoes the
	// request's headers shows no credential.
	Message string
	// Headers are the response's rate-limit headers, Retry-After included.
	Headers shaping.RateLimitHeaders
	// Err is the original error.
	Err error
}

// Classify turns the error of one go-openai call (and the response headers,
// which go-openai keeps on the error path too) into an Outcome. An answer
// larger than the bound (*ResponseTooLargeError) is permanent. An HTTP-date
// Retry-After is read against the system clock: it is the server's wall
// time, whatever clock the worker runs on.
func Classify(err error, header http.Header, provider Provider) Outcome {
	if err == nil {
		o := Outcome{Class: ClassSuccess, Status: http.StatusOK}
		if header != nil {
			o.Headers = shaping.ParseHeaders(header, time.Now())
		}
		return o
	}
	o := Outcome{Err: err, Message: err.Error()}
	if header != nil {
		o.Headers = shaping.ParseHeaders(header, time.Now())
	}
	var tooLarge *ResponseTooLargeError
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case errors.As(err, &tooLarge):
		o.Status, o.Code, o.Class, o.Message = tooLarge.Status, CodeResponseTooLarge, ClassPermanent, tooLarge.Error()
	case errors.As(err, &apiErr):
		o.Status = apiErr.HTTPStatusCode
		o.Code = codeString(apiErr.Code)
		if o.Code == "" {
			o.Code = apiErr.Type
		}
		o.Message = apiErr.Message
		o.Class = classifyStatus(o.Status, o.Code, apiErr.Type, provider)
		// The lane learns the provider's calls at a time from these.
		o.Headers.Concurrency = o.Class == ClassRateLimited && shaping.ConcurrencyMessage(apiErr.Message)
	case errors.As(err, &reqErr):
		o.Status = reqErr.HTTPStatusCode
		o.Code = "http_" + strconv.Itoa(o.Status)
		o.Class = classifyStatus(o.Status, "", "", provider)
		// The body that did not decode says more than the decoder.
		if len(reqErr.Body) > 0 {
			o.Message = string(reqErr.Body)
		} else if reqErr.Err != nil {
			o.Message = reqErr.Err.Error()
		}
	case isTimeout(err):
		o.Code, o.Class = "timeout", ClassRetryable
	case isConnectionError(err):
		o.Code, o.Class = codeConnectionError, ClassRetryable
	case errors.Is(err, context.Canceled):
		o.Code, o.Class = "cancelled", ClassRetryable
	default:
		o.Code, o.Class = "client_error", ClassPermanent
	}
	o.Code, o.Message = redact.Text(o.Code, codeMaxBytes), errorText(o.Status, o.Message)
	return o
}

// codeConnectionError is the code of a call that got no answer: the
// connection was refused, reset or closed.
const codeConnectionError = "connection_error"

// codeMaxBytes bounds an error code: the upstream's own, or llmq's.
const codeMaxBytes = 64

// messageMaxBytes bounds an Outcome's Message, so that a dead letter's
// "code: message" fits redact.ErrorMaxBytes.
const messageMaxBytes = redact.ErrorMaxBytes - codeMaxBytes - len(": ")

// errorText is msg as a job or a letter keeps it: "HTTP status: " first
// when a response arrived, sanitised and bounded to messageMaxBytes
// (redact.Text).
func errorText(status int, msg string) string {
	prefix := ""
	if status > 0 {
		prefix = "HTTP " + strconv.Itoa(status) + ": "
	}
	return prefix + redact.Text(msg, messageMaxBytes-len(prefix))
}

func classifyStatus(status int, code, typ string, provider Provider) Class {
	switch {
	case status == http.StatusTooManyRequests:
		if isBilling(code, typ, provider) {
			return ClassPermanent
		}
		return ClassRateLimited
	case status == http.StatusRequestTimeout, status == http.StatusConflict, status >= 500:
		return ClassRetryable
	case status >= 400:
		return ClassPermanent
	}
	return ClassRetryable
}

// isBilling reports a 429 that no retry can fix: out of credit or over a
// spend limit. DashScope's insufficient_quota is TPM throttling instead.
func isBilling(code, typ string, provider Provider) bool {
	switch code {
	case "credit_balance_exhausted", "organization_spend_limit_exceeded",
		"project_spend_limit_exceeded", "organization_usage_limit_exceeded":
		return true
	case "insufficient_quota":
		return provider != ProviderDashScope
	}
	return typ == "insufficient_quota" && provider != ProviderDashScope
}

func codeString(code any) string {
	switch c := code.(type) {
	case nil:
		return ""
	case string:
		return c
	case int:
		// go-openai decodes "code": null (OpenAI's 5xx) as the int 0.
		if c == 0 {
			return ""
		}
		return strconv.Itoa(c)
	default:
		return fmt.Sprint(c)
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isConnectionError(err error) bool {
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return true
	}
	// net/http reports a server that closed the connection mid-request this way.
	return strings.Contains(err.Error(), "server closed") || strings.Contains(err.Error(), "connection reset")
}
