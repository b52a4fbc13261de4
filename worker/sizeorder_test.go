package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
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

// TestWorkerLeavesALargeJobQueued: a job whose tokens the lane's buckets
// do not hold stays queued in Postgres, where a question recorded after
// it, and sorted before it by its size, passes it; it is claimed once the
// buckets hold it. Claimed with the question instead (a claim counted in
// jobs alone), it would take in the lane the refill the question needs.
func TestWorkerLeavesALargeJobQueued(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Now())
	// The provider's minute holds 600 tokens; completions are exactly
	// max_tokens long (nothing refunded), and answers take no time on the
	// fake clock.
	tb := setup(t, upstreamsim.Config{Seed: 73,
		Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: 600}},
		Output:  upstreamsim.OutputConfig{Distribution: upstreamsim.DistFixed, Min: 1, Max: 1 << 20, Mean: 1 << 20},
	}, upstreamsim.WithClock(clock))
	st, err := store.Open(context.Background(), storetest.NewDB(t), store.WithClock(clock))
	require.NoError(t, err)
	t.Cleanup(st.Close)
	tb.store, tb.letters.store = st, st
	tb.start(t, func(c *worker.Config) {
		c.Store, c.Clock, c.Strategy = st.Queue(), clock, shaping.StrategyShape
		c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{"m": {TPM: 600}}}
	})
	job := func(id string, maxTokens int) []byte {
		return fmt.Appendf(nil, `{"id":%q,"body":{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":"Hello world"}]}}`, id, maxTokens)
	}

	// The first answer's headers leave 600 - 109 = 491 tokens.
	tb.publish(t, job("first", 100))
	require.Equal(t, llmq.StatusSucceeded, tb.waitTerminal(t, []string{"first"}, 10*time.Second)["first"].Status)
	// 509 tokens: more than the buckets hold.
	tb.publish(t, job("document", 500))
	require.Eventually(t, func() bool { return tb.count(t, `id = 'document'`) == 1 }, 10*time.Second, time.Millisecond)
	tb.publish(t, job("question", 32))
	require.Equal(t, llmq.StatusSucceeded, tb.waitTerminal(t, []string{"question"}, 10*time.Second)["question"].Status)
	doc := tb.get(t, "document")
	require.Equal(t, llmq.StatusQueued, doc.Status, "a claim that took the question took the document with it")
	require.Less(t, tb.get(t, "question").SchedKey, doc.SchedKey)

	// A minute refills the buckets: the document is claimed and served.
	clock.Advance(time.Minute)
	require.Equal(t, llmq.StatusSucceeded, tb.waitTerminal(t, []string{"document"}, 10*time.Second)["document"].Status)
}
