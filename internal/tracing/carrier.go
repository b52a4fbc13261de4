package tracing

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The W3C trace context headers, as the broker messages carry them.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// Encode is the stored form of ctx's span context (jobs.trace_context):
// the traceparent value, then a newline and the tracestate when there is
// one (neither holds a newline). "" when tracing is off or ctx has no
// valid span context.
func Encode(ctx context.Context) string {
	if !enabled.Load() || !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	prop.Inject(ctx, c)
	if ts := c[HeaderTracestate]; ts != "" {
		return c[HeaderTraceparent] + "\n" + ts
	}
	return c[HeaderTraceparent]
}

// Decode returns ctx with the remote span context of stored (Encode's
// form) as its parent; ctx itself when stored is "" or invalid.
func Decode(ctx context.Context, stored string) context.Context {
	if stored == "" {
		return ctx
	}
	tp, ts, _ := strings.Cut(stored, "\n")
	return prop.Extract(ctx, propagation.MapCarrier{HeaderTraceparent: tp, HeaderTracestate: ts})
}

// SetHeaders adds the headers of stored (Encode's form) to h, which it
// allocates when nil, and returns h; h as it is when stored is "".
func SetHeaders(h map[string]string, stored string) map[string]string {
	if stored == "" {
		return h
	}
	if h == nil {
		h = make(map[string]string, 2)
	}
	tp, ts, _ := strings.Cut(stored, "\n")
	h[HeaderTraceparent] = tp
	if ts != "" {
		h[HeaderTracestate] = ts
	}
	return h
}

// FromHeaders is the stored form of the trace context broker headers h
// carry: "" when tracing is off or they hold no valid one.
func FromHeaders(h map[string]string) string {
	if !enabled.Load() || h[HeaderTraceparent] == "" {
		return ""
	}
	return Encode(prop.Extract(context.Background(), propagation.MapCarrier(h)))
}

// FromRequest returns ctx with the trace context of r's headers as its
// remote parent (ctx when tracing is off).
func FromRequest(ctx context.Context, r *http.Request) context.Context {
	if !enabled.Load() {
		return ctx
	}
	return prop.Extract(ctx, propagation.HeaderCarrier(r.Header))
}

// TraceIDOf is the trace id (32 hex digits) of a stored trace context
// (Encode's form), "" when it holds none.
func TraceIDOf(stored string) string {
	// traceparent: version "-" trace-id "-" parent-id "-" flags
	if len(stored) < 55 || stored[2] != '-' || stored[35] != '-' {
		return ""
	}
	return stored[3:35]
}
