package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

// sizedJob is a high-priority job with no deadline whose prompt is words
// words long and whose max_tokens is maxTokens.
func sizedJob(t *testing.T, id string, words, maxTokens int) *llmq.Job {
	t.Helper()
	prompt := strings.TrimSpace(strings.Repeat("word ", words))
	j, err := llmq.Decode(fmt.Appendf(nil, `{"id":%q,"tenant":"acme","priority":"high",
		"body":{"model":"big","messages":[{"role":"user","content":%q}],"max_tokens":%d}}`, id, prompt, maxTokens), llmq.DecodeOptions{})
	require.NoError(t, err)
	return j
}

// TestInsertOutboxIsSized: a job recorded through the outbox (POST
// /v1/jobs, llmq produce) with the estimate its Sizer gave it keeps that
// estimate and sorts by its size delay, as a job the worker ingests does,
// so a short question recorded after a document is claimed before it.
func TestInsertOutboxIsSized(t *testing.T) {
	t.Parallel()
	est, err := shaping.NewEstimator(shaping.EstimatorConfig{})
	require.NoError(t, err)
	sizer := store.Sizer{Estimator: est, Order: 10,
		Catalog: llmq.Catalog{Models: map[string]llmq.Model{"big": {TPM: 60000}}}}
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	ctx := context.Background()
	s, err := store.Open(ctx, storetest.NewDB(t), store.WithClock(clock))
	require.NoError(t, err)
	t.Cleanup(s.Close)

	long, short := sizedJob(t, "long", 2000, 500), sizedJob(t, "short", 10, 50)
	_, err = s.Outbox().InsertOutbox(ctx, []store.NewJob{sizer.NewJob(long)})
	require.NoError(t, err)
	clock.Advance(time.Second)
	_, err = s.Outbox().InsertOutbox(ctx, []store.NewJob{sizer.NewJob(short)})
	require.NoError(t, err)

	for _, j := range []*llmq.Job{long, short} {
		want := sizer.NewJob(j)
		rec, err := s.Jobs().Get(ctx, j.Tenant, j.ID)
		require.NoError(t, err)
		require.Positive(t, want.EstPromptTokens, j.ID)
		require.Equal(t, want.EstPromptTokens, rec.EstPromptTokens, j.ID)
		require.Equal(t, want.EstOutputTokens, rec.EstOutputTokens, j.ID)
		// 60,000 TPM is 1,000 tokens a second: ten times a token's time
		// is 10 ms.
		tokens := rec.EstPromptTokens + rec.EstOutputTokens
		require.Equal(t, time.Duration(tokens)*10*time.Millisecond, rec.SchedKey.Sub(rec.CreatedAt), j.ID)
	}
	// The outbox's jobs are queued and not yet published; Publish marks
	// them so the claim takes them as it would a published job.
	require.NoError(t, s.Outbox().MarkPublished(ctx, []store.Key{{Tenant: "acme", ID: "long"}, {Tenant: "acme", ID: "short"}}))
	var order []string
	for range 2 {
		recs, err := s.Queue().Claim(ctx, store.ClaimRequest{Model: "big", Owner: "w", Lease: time.Minute, Limit: 1})
		require.NoError(t, err)
		require.Len(t, recs, 1)
		order = append(order, recs[0].ID)
	}
	require.Equal(t, []string{"short", "long"}, order)
}

// TestSizerNewJob: the size delay is Order times the estimated tokens'
// time at the model's TPM, bounded by a day; none without a TPM, with
// Order off, or without an estimator.
func TestSizerNewJob(t *testing.T) {
	t.Parallel()
	est, err := shaping.NewEstimator(shaping.EstimatorConfig{})
	require.NoError(t, err)
	j := sizedJob(t, "j", 100, 400)
	base := store.Sizer{Estimator: est, Catalog: llmq.Catalog{Models: map[string]llmq.Model{"big": {TPM: 6000}}}}
	tokens := base.NewJob(j).EstPromptTokens + 400
	require.Greater(t, tokens, 500)
	for _, tt := range []struct {
		name  string
		z     store.Sizer
		delay time.Duration
	}{
		{"twice its time at 6,000 TPM", func() store.Sizer { z := base; z.Order = 2; return z }(),
			time.Duration(tokens) * 20 * time.Millisecond},
		{"off", func() store.Sizer { z := base; z.Order = -1; return z }(), 0},
		{"no TPM", func() store.Sizer { z := base; z.Order = 10; z.Catalog = llmq.Catalog{}; return z }(), 0},
		{"a day at most", func() store.Sizer {
			z := base
			z.Order, z.Catalog = 10, llmq.Catalog{Models: map[string]llmq.Model{"big": {TPM: 0.001}}}
			return z
		}(), 24 * time.Hour},
	} {
		n := tt.z.NewJob(j)
		require.Equal(t, tt.delay, n.SizeDelay, tt.name)
		require.Equal(t, 400, n.EstOutputTokens, tt.name)
	}
	require.Equal(t, store.NewJob{Job: j}, store.Sizer{Order: 10}.NewJob(j))
}
