package worker_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/tracing"
	"github.com/llmq/llmq/internal/tracing/tracingtest"
)

// BenchmarkPipelineTraced is BenchmarkPipeline with tracing on, every span
// sampled and exported to an in-process OTLP/HTTP receiver (each job its
// ingest, wait, run, quota wait, call and result write spans), to compare
// with BenchmarkPipeline's jobs/s (docs/design/tracing.md).
func BenchmarkPipelineTraced(b *testing.B) {
	recv := tracingtest.NewDiscarding(b)
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	b.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	shutdown, err := tracing.Setup(context.Background(), "llmq-bench")
	require.NoError(b, err)
	BenchmarkPipeline(b)
	require.NoError(b, shutdown(context.Background()))
	require.Positive(b, recv.Count())
}
