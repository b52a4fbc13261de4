package worker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/shaping"
)

// TestDispatchQuickCanary: while a lane tries its provider with a staged
// burst (docs/design/rate-limiting.md#pacing-inside-the-slot), a document
// that would go as the canary waits and asks the claimer for quick jobs,
// as many as the lane sends up to its canary (one: the requests' trial is
// full); a question that arrives goes as the canary in its place, and the
// document, paced behind it, goes when the canary's admission doubles the
// trials. With no quick job, the document goes as the canary after
// quickCanaryWait.
func TestDispatchQuickCanary(t *testing.T) {
	t.Parallel()
	question := shaping.Request{PromptTokens: 24, MaxOutputTokens: 120}
	document := shaping.Request{PromptTokens: 1018, MaxOutputTokens: 500}
	h := func(remReq, remTok float64) shaping.RateLimitHeaders {
		return shaping.RateLimitHeaders{LimitRequests: 600, HasLimitRequests: true, RemainingRequests: remReq, HasRemainingRequests: true,
			LimitTokens: 150_000, HasLimitTokens: true, RemainingTokens: remTok, HasRemainingTokens: true}
	}
	// setup is a lane of 600 RPM / 150k TPM whose probe answered and
	// whose first stage filled the requests' trial (50 questions).
	setup := func(t *testing.T) (context.Context, *clockwork.FakeClock, *lane, *atomic.Int32) {
		clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		cat := llmq.Catalog{Models: map[string]llmq.Model{"m": {RPM: 600, TPM: 150_000, Concurrency: 512}}}
		wanted := &atomic.Int32{}
		ls, err := newLaneSet(laneSetConfig{Upstream: upstreamFunc(func(context.Context, string, []byte) Reply { return Reply{} }),
			Scopes: openScopes{}, Metrics: newMetrics(prometheus.NewRegistry()), BudgetAllows: func(*job, float64) bool { return true },
			Catalog: func() llmq.Catalog { return cat }, Strategy: shaping.StrategyShape, QuotaScope: "sim", Clock: clock,
			CanaryWanted: func() { wanted.Add(1) }})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		ls.begin(ctx, ctx)
		l := ls.lane("m")
		l.observe(question)
		now := clock.Now()
		r, err := l.shaper.ReserveAt(now, question)
		require.NoError(t, err)
		require.NoError(t, l.shaper.SendAt(now, r).DoneAt(now, shaping.Outcome{Headers: h(599, 149_856)}))
		for range 50 {
			r, err := l.shaper.ReserveAt(now, question)
			require.NoError(t, err)
			require.Equal(t, now, l.shaper.PaceReservationAt(now, &r), "the first stage goes at once")
			l.shaper.SendAt(now, r)
		}
		require.Equal(t, 1, l.shaper.CanaryAfter(now, question))
		return ctx, clock, l, wanted
	}
	push := func(l *lane, ctx context.Context, req shaping.Request) *ticket {
		tk := &ticket{ctx: ctx, req: req, done: make(chan admission, 1)}
		l.sched.Push(tk, llmq.PriorityNormal.Rank())
		return tk
	}
	answered := func(t *testing.T, ctx context.Context, tk *ticket) admission {
		t.Helper()
		select {
		case a := <-tk.done:
			require.NoError(t, a.err)
			return a
		case <-ctx.Done():
			t.Fatal("the ticket was not admitted")
			return admission{}
		}
	}

	t.Run("quick", func(t *testing.T) {
		t.Parallel()
		ctx, clock, l, wanted := setup(t)
		doc := push(l, ctx, document)
		require.NoError(t, clock.BlockUntilContext(ctx, 1), "the document waits for a quick job")
		require.Equal(t, int32(1), wanted.Load())
		require.Equal(t, int64(1), l.quickWanted.Load(), "the claimer is asked for one")
		require.Empty(t, doc.done)
		q := answered(t, ctx, push(l, ctx, question))
		require.NoError(t, clock.BlockUntilContext(ctx, 1), "the document waits for its pacing slot behind the canary")
		require.Empty(t, doc.done)
		require.NoError(t, q.permit.DoneAt(clock.Now(), shaping.Outcome{PromptTokens: 24, CompletionTokens: 120, Headers: h(548, 142_000)}))
		answered(t, ctx, doc)
		require.Equal(t, int32(1), wanted.Load())
	})
	t.Run("none", func(t *testing.T) {
		t.Parallel()
		ctx, clock, l, wanted := setup(t)
		doc := push(l, ctx, document)
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		require.Equal(t, int32(1), wanted.Load())
		require.Empty(t, doc.done)
		clock.Advance(quickCanaryWait)
		answered(t, ctx, doc)
		require.Zero(t, l.shaper.CanaryAfter(clock.Now(), question), "the document went as the canary")
	})
}
