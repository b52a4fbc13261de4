// Package tracing follows one job end to end with OpenTelemetry, from the
// enqueue to the result write, in one trace (docs/design/tracing.md); the
// W3C trace context travels in the broker message's headers and the job's
// row. Tracing is on when Setup finds an OTLP endpoint set; off, the hot
// path pays for a load of one flag (docs/design/tracing.md#the-tracing-package).
package tracing

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// scope is the instrumentation scope of every llmq span.
const scope = "github.com/llmq/llmq"

var (
	enabled atomic.Bool
	tracer  atomic.Pointer[trace.Tracer]
	// prop is always W3C trace context, whatever OTEL_PROPAGATORS says:
	// it is the format of the stored and published context.
	prop                    = propagation.TraceContext{}
	noopTracer trace.Tracer = noop.NewTracerProvider().Tracer(scope)
)

// Configured reports whether the environment (getenv) turns tracing on.
func Configured(getenv func(string) string) bool {
	if v, err := strconv.ParseBool(strings.TrimSpace(getenv("OTEL_SDK_DISABLED"))); err == nil && v {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup turns tracing on when the environment asks for it (Configured),
// exporting over OTLP/HTTP with the batching span processor, service as
// the default service.name (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
// win). The returned function flushes the spans and turns tracing off;
// it is a no-op when tracing stayed off.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	if !Configured(os.Getenv) {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Install(tp)
	return func(ctx context.Context) error {
		Install(nil)
		return tp.Shutdown(ctx)
	}, nil
}

// Install makes tp the provider of llmq's spans (nil: tracing off). Setup
// calls it; tests install a provider of their own.
func Install(tp trace.TracerProvider) {
	if tp == nil {
		enabled.Store(false)
		tracer.Store(nil)
		return
	}
	t := tp.Tracer(scope)
	tracer.Store(&t)
	enabled.Store(true)
}

// Enabled reports whether spans are recorded.
func Enabled() bool { return enabled.Load() }

// Tracer is llmq's tracer: a no-op one when tracing is off.
func Tracer() trace.Tracer {
	if t := tracer.Load(); t != nil {
		return *t
	}
	return noopTracer
}

// Start starts a span named name under ctx's; off, it returns ctx and a
// span that records nothing.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return Tracer().Start(ctx, name, opts...)
}

// TraceID is the trace id of ctx's span in hex, "" when there is none.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}
