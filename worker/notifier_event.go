package worker

import (
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/llmq/llmq"
)

// appendEvent appends e as JSON to dst, byte for byte what json.Marshal
// writes, without reflection and without validating e.Response again
// (Postgres stored it as jsonb): the notifier encodes one per delivery
// (docs/design/notifications.md, Cost). A non-finite CostUSD, which
// json.Marshal refuses, is written as 0.
func appendEvent(dst []byte, e *llmq.ResultEvent) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendString(dst, e.Type)
	dst = append(dst, `,"version":`...)
	dst = strconv.AppendInt(dst, int64(e.Version), 10)
	dst = appendField(dst, "event_id", e.EventID)
	dst = appendField(dst, "job_id", e.JobID)
	dst = appendField(dst, "tenant", e.Tenant)
	dst = appendField(dst, "status", string(e.Status))
	if e.CorrelationID != "" {
		dst = appendField(dst, "correlation_id", e.CorrelationID)
	}
	if e.Model != "" {
		dst = appendField(dst, "model", e.Model)
	}
	if len(e.Response) > 0 {
		dst = append(dst, `,"response":`...)
		dst = append(dst, e.Response...)
	}
	if e.Error != nil {
		dst = append(dst, `,"error":{"code":`...)
		dst = appendString(dst, e.Error.Code)
		dst = appendField(dst, "message", e.Error.Message)
		if e.Error.Status != 0 {
			dst = append(dst, `,"status":`...)
			dst = strconv.AppendInt(dst, int64(e.Error.Status), 10)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `,"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(e.Usage.PromptTokens), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(e.Usage.CompletionTokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(e.Usage.TotalTokens), 10)
	dst = append(dst, `},"cost_usd":`...)
	dst = appendFloat(dst, e.CostUSD)
	dst = append(dst, `,"attempts":`...)
	dst = strconv.AppendInt(dst, int64(e.Attempts), 10)
	if len(e.Metadata) > 0 {
		dst = append(dst, `,"metadata":{`...)
		keys := make([]string, 0, len(e.Metadata))
		for k := range e.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = appendString(dst, e.Metadata[k])
		}
		dst = append(dst, '}')
	}
	dst = appendTime(dst, "created_at", e.CreatedAt)
	if e.StartedAt != nil {
		dst = appendTime(dst, "started_at", *e.StartedAt)
	}
	if e.FinishedAt != nil {
		dst = appendTime(dst, "finished_at", *e.FinishedAt)
	}
	return append(dst, '}')
}

// appendField appends ,"name":"value".
func appendField(dst []byte, name, value string) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	return appendString(dst, value)
}

// appendTime appends ,"name":"t" in RFC 3339 with nanoseconds, as
// time.Time's MarshalJSON.
func appendTime(dst []byte, name string, t time.Time) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, `":"`...)
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"')
}

// appendFloat appends f as encoding/json does (ES6 number formatting).
func appendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, '0')
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// 1e-07 becomes 1e-7.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string escaped as encoding/json does:
// <, > and & as \u escapes, invalid UTF-8 as U+FFFD, U+2028 and U+2029
// escaped.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
