package tracing

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// StartServer starts the server span of r, named by its route pattern
// ("POST /v1/jobs"), under the trace context of r's headers; it returns r
// with the span in its context. Off, it returns r and a span that records
// nothing.
func StartServer(r *http.Request, route string) (*http.Request, trace.Span) {
	if !enabled.Load() {
		return r, trace.SpanFromContext(r.Context())
	}
	ctx, s := Tracer().Start(FromRequest(r.Context(), r), route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", route)))
	return r.WithContext(ctx), s
}

// EndServer ends a server span with the answer's status (5xx an error).
func EndServer(s trace.Span, status int) {
	if !s.IsRecording() {
		return
	}
	s.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		s.SetStatus(codes.Error, http.StatusText(status))
	}
	s.End()
}

// Observe observes v on o with the trace id of ctx's sampled span as its
// exemplar (trace_id), linking the histogram's bucket to a trace; a plain
// Observe when there is none.
func Observe(ctx context.Context, o prometheus.Observer, v float64) {
	if enabled.Load() {
		if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
			if eo, ok := o.(prometheus.ExemplarObserver); ok {
				eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
				return
			}
		}
	}
	o.Observe(v)
}
