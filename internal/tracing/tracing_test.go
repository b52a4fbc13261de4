package tracing_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmq/llmq/internal/tracing"
)

func TestConfigured(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want bool
	}{
		{env: map[string]string{}, want: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"}, want: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://localhost:4318/v1/traces"}, want: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318", "OTEL_SDK_DISABLED": "true"}, want: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318", "OTEL_SDK_DISABLED": "false"}, want: true},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tracing.Configured(func(k string) string { return tt.env[k] }), "%v", tt.env)
	}
}

// TestOffStoresNothing: with tracing off no trace context is taken from a
// request's headers or a message's, and none is stored or published.
func TestOffStoresNothing(t *testing.T) {
	require.False(t, tracing.Enabled())
	h := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	require.Empty(t, tracing.FromHeaders(h))
	ctx, span := tracing.Start(context.Background(), "x")
	require.False(t, span.IsRecording())
	require.Empty(t, tracing.Encode(ctx))
	require.Nil(t, tracing.StartJob(tracing.JobInfo{ID: "j"}))
	require.Nil(t, tracing.SetHeaders(nil, ""))
}

// TestStoredForm: the trace context of headers, stored, published again and
// read back is the same, tracestate included; a malformed traceparent is
// dropped.
func TestStoredForm(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	tracing.Install(tp)
	t.Cleanup(func() { tracing.Install(nil) })
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	stored := tracing.FromHeaders(map[string]string{"traceparent": parent, "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"})
	require.Equal(t, parent+"\ncongo=t61rcWkgMzE,rojo=00f067aa0ba902b7", stored)
	require.Equal(t, map[string]string{"traceparent": parent, "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
		tracing.SetHeaders(nil, stored))
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", tracing.TraceIDOf(stored))
	require.Equal(t, parent, tracing.Encode(tracing.Decode(context.Background(), parent)))
	require.Empty(t, tracing.FromHeaders(map[string]string{"traceparent": "00-zz-00f067aa0ba902b7-01"}))
	require.Empty(t, tracing.TraceIDOf(""))
}
