package tracing_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/tracing"
	"github.com/llmq/llmq/internal/tracing/tracingtest"
)

// BenchmarkWorkerJob is the tracing a worker does for one job (the
// headers read at ingest, the ingest, wait and run spans, a quota wait,
// a call and the result write), off and on (every span sampled and
// exported over OTLP/HTTP to an in-process receiver): its CPU cost per
// job, to compare with the pipeline's per job (docs/design/tracing.md).
func BenchmarkWorkerJob(b *testing.B) {
	h := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	run := func(b *testing.B) {
		b.ReportAllocs()
		now := time.Now()
		cpu0 := processCPU(b)
		for b.Loop() {
			stored, ingest := tracing.StartIngest(h, "job-1", "jobs/0/1", now)
			if ingest != nil {
				ingest.End()
			}
			j := tracing.StartJob(tracing.JobInfo{Stored: stored, ID: "job-1", Tenant: "acme", Model: "gpt-4o-mini",
				Created: now, FirstClaim: true, ClaimedTime: now})
			tracing.EndErr(j.Child(tracing.SpanQuotaWait), nil)
			tracing.EndCall(j.Child(tracing.SpanCall), tracing.Call{Model: "gpt-4o-mini", Entry: "main", Status: 200,
				Class: "success", PromptTokens: 12, CompletionTokens: 40})
			tracing.EndErr(j.Child(tracing.SpanResultSave), nil)
			j.Finished("succeeded")
			j.End()
		}
		// The process's CPU, export and receiver included, is what the
		// load on a shared machine does not inflate as it does ns/op.
		b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/job")
	}
	b.Run("off", run)
	b.Run("on", func(b *testing.B) {
		recv := tracingtest.NewDiscarding(b)
		b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
		shutdown, err := tracing.Setup(context.Background(), "llmq-bench")
		require.NoError(b, err)
		run(b)
		require.NoError(b, shutdown(context.Background()))
	})
}

// processCPU is the user and system CPU the process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
