package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/worker"
)

// TestWorkerSizeDelay: at ingest a job of a model whose TPM is configured
// sorts its estimated tokens' time at that TPM (times SizeOrder) behind
// its creation; without a TPM, or with SizeOrder off, it sorts at its
// creation (plus its priority's aging step: these jobs are normal).
func TestWorkerSizeDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		sizeOrder float64
		tpm       float64
		delay     func(tokens int) time.Duration
	}{
		{name: "default: fifty times its time at 60,000 TPM", tpm: 60000,
			delay: func(n int) time.Duration { return time.Duration(n) * 50 * time.Millisecond }},
		{name: "twice its time", sizeOrder: 2, tpm: 6000,
			delay: func(n int) time.Duration { return time.Duration(n) * 20 * time.Millisecond }},
		{name: "off", sizeOrder: -1, tpm: 6000, delay: func(int) time.Duration { return 0 }},
		{name: "no TPM", delay: func(int) time.Duration { return 0 }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, upstreamsim.Config{Seed: 71 + uint64(i)})
			tb.start(t, func(c *worker.Config) {
				c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{"m": {TPM: tt.tpm}}}
				c.SizeOrder = tt.sizeOrder
			})
			tb.publish(t, jobJSON("sized", "m", ""))
			rec := tb.waitTerminal(t, []string{"sized"}, 10*time.Second)["sized"]
			require.Equal(t, llmq.StatusSucceeded, rec.Status)
			tokens := rec.EstPromptTokens + rec.EstOutputTokens
			require.Equal(t, 32, rec.EstOutputTokens)
			require.Positive(t, rec.EstPromptTokens)
			want := store.AgingStepDefault + tt.delay(tokens)
			require.Equal(t, want.Truncate(time.Microsecond), rec.SchedKey.Sub(rec.CreatedAt))
		})
	}
}
