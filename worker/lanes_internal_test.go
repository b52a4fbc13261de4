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
// burst (docs/design/rate-limiting.md#pacing-inside-the-slot) and its
// quick requests would fill the trials up to a canary past the requests'
// trial, a document waits and the claimer is asked for as many quick jobs
// (5 left in the requests' trial, and the canary); the questions that
// arrive go, the last as the canary, and the document, paced behind it,
// goes when the canary's admission doubles the trials. With no quick job,
// the document goes after quickCanaryWait.
func TestDispatchQuickCanary(t *testing.T) {
	t.Parallel()
	question := shaping.Request{PromptTokens: 24, MaxOutputTokens: 120}
	document := shaping.Request{PromptTokens: 1018, MaxOutputTokens: 500}
	h := func(remReq, remTok float64) shaping.RateLimitHeaders {
		return shaping.RateLimitHeaders{LimitRequests: 600, HasLimitRequests: true, RemainingRequests: remReq, HasRemainingRequests: true,
			LimitTokens: 150_000, HasLimitTokens: true, RemainingTokens: remTok, HasRemainingTokens: true}
	}
	// setup is a lane of 600 RPM / 150k TPM whose probe answered and
	// whose first stage sent 45 questions of its requests' trial of 50.
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
		l.observe(document)
		require.Equal(t, shaping.Request{MaxOutputTokens: 213}, l.typical())
		require.Equal(t, shaping.Request{MaxOutputTokens: 144}, l.quickTypical())
		now := clock.Now()
		r, err := l.shaper.ReserveAt(now, question)
		require.NoError(t, err)
		require.NoError(t, l.shaper.SendAt(now, r).DoneAt(now, shaping.Outcome{Headers: h(599, 149_856)}))
		for range 45 {
			r, err := l.shaper.ReserveAt(now, question)
			require.NoError(t, err)
			require.Equal(t, now, l.shaper.PaceReservationAt(now, &r), "the first stage goes at once")
			l.shaper.SendAt(now, r)
		}
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
		require.NoError(t, clock.BlockUntilContext(ctx, 1), "the document waits for quick jobs")
		require.Equal(t, int32(1), wanted.Load())
		require.Equal(t, int64(6), l.quickWanted.Load(), "the claimer is asked for 5 and the canary")
		require.Empty(t, doc.done)
		var q admission
		for range 6 {
			q = answered(t, ctx, push(l, ctx, question))
		}
		n, _ := l.shaper.CanaryAfter(clock.Now(), question)
		require.Zero(t, n, "the sixth question went as the canary")
		require.NoError(t, clock.BlockUntilContext(ctx, 1), "the document waits for its pacing slot behind the canary")
		require.Empty(t, doc.done)
		require.NoError(t, q.permit.DoneAt(clock.Now(), shaping.Outcome{PromptTokens: 24, CompletionTokens: 120, Headers: h(548, 142_000)}))
		answered(t, ctx, doc)
		require.Equal(t, int32(1), wanted.Load())
	})
	t.Run("weak", func(t *testing.T) {
		t.Parallel()
		ctx, clock, l, wanted := setup(t)
		// One request and 150 tokens left in the trials: a question
		// fills both, and the next goes past the requests' trial.
		now := clock.Now()
		for _, req := range []shaping.Request{document, document, document, {PromptTokens: 1196, MaxOutputTokens: 120}} {
			r, err := l.shaper.ReserveAt(now, req)
			require.NoError(t, err)
			require.Equal(t, now, l.shaper.PaceReservationAt(now, &r))
			l.shaper.SendAt(now, r)
		}
		doc := push(l, ctx, document)
		require.NoError(t, clock.BlockUntilContext(ctx, 1), "the document waits for quick jobs")
		require.Equal(t, int32(1), wanted.Load())
		medium := push(l, ctx, shaping.Request{PromptTokens: 80, MaxOutputTokens: 120})
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		require.Empty(t, medium.done, "200 tokens, past the tokens' trial alone: no canary while the document waits")
		answered(t, ctx, push(l, ctx, question))
		answered(t, ctx, medium)
		n, _ := l.shaper.CanaryAfter(clock.Now(), question)
		require.Zero(t, n, "past the requests' trial now, it went as the canary")
		require.Empty(t, doc.done)
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
	})
}
