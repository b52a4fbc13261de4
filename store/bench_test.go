package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

// BenchmarkJobLifecycle measures one job's path through the store as the
// worker drives it, in batches of 256 as the worker makes them: Ingest and
// Claim once per batch, then MarkCalling and StoreResult per job.
func BenchmarkJobLifecycle(b *testing.B) {
	ctx := context.Background()
	s, err := store.Open(ctx, storetest.NewDB(b))
	require.NoError(b, err)
	defer s.Close()
	jobs := make([]store.NewJob, b.N)
	for i := range jobs {
		j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":"bench-%d","body":{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":16}}`, i)), llmq.DecodeOptions{})
		require.NoError(b, err)
		jobs[i] = store.NewJob{Job: j, EstPromptTokens: 8, EstOutputTokens: 16}
	}
	resp := json.RawMessage(`{"id":"chatcmpl-1","choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`)
	b.ResetTimer()
	for len(jobs) > 0 {
		batch := jobs[:min(256, len(jobs))]
		jobs = jobs[len(batch):]
		if _, err := s.Ingest(ctx, batch); err != nil {
			b.Fatal(err)
		}
		recs, err := s.Claim(ctx, store.ClaimRequest{Model: "m", Owner: "bench", Lease: time.Minute, Limit: len(batch)})
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range recs {
			if _, err := s.MarkCalling(ctx, r.Lease(), store.PolicyState{}); err != nil {
				b.Fatal(err)
			}
			if _, err := s.StoreResult(ctx, r.Key(), store.Result{Response: resp, UsedModel: "m", PromptTokens: 5, CompletionTokens: 1}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkClaim measures one claim of 8 jobs, as a scheduler makes them
// while a quota binds, from a backlog of 10,000 queued jobs of one model
// spread over tenants (the claim's cost grows with the tenants that have
// jobs queued, not with the backlog).
func BenchmarkClaim(b *testing.B) {
	for _, tenants := range []int{1, 4, 32} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			ctx := context.Background()
			s, err := store.Open(ctx, storetest.NewDB(b))
			require.NoError(b, err)
			defer s.Close()
			const backlog, limit = 10_000, 8
			// Jobs are ingested in batches of 256, as the worker does: a
			// batch shares one sched_key.
			add := func(from, n int) {
				jobs := make([]store.NewJob, n)
				for i := range jobs {
					j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":"bench-%d","tenant":"t%d","body":{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":16}}`,
						from+i, (from+i)%tenants)), llmq.DecodeOptions{})
					require.NoError(b, err)
					jobs[i] = store.NewJob{Job: j, EstPromptTokens: 8, EstOutputTokens: 16}
				}
				for len(jobs) > 0 {
					_, err := s.Ingest(ctx, jobs[:min(256, len(jobs))])
					require.NoError(b, err)
					jobs = jobs[min(256, len(jobs)):]
				}
			}
			add(0, backlog)
			_, err = s.Pool().Exec(ctx, `ANALYZE jobs`)
			require.NoError(b, err)
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.Claim(ctx, store.ClaimRequest{Model: "m", Owner: "bench", Lease: time.Minute, Limit: limit}); err != nil {
					b.Fatal(err)
				}
				if i%(backlog/limit/2) == backlog/limit/2-1 {
					b.StopTimer()
					add(backlog+i*limit, backlog/2)
					b.StartTimer()
				}
			}
		})
	}
}

// BenchmarkOutbox measures the Postgres side of `llmq produce` (the writes
// a job needs, the ceiling of the producer before any broker): per batch
// of 1,000 jobs as produce sends them, InsertOutbox then MarkPublished.
func BenchmarkOutbox(b *testing.B) {
	ctx := context.Background()
	s, err := store.Open(ctx, storetest.NewDB(b))
	require.NoError(b, err)
	defer s.Close()
	jobs := make([]*llmq.Job, b.N)
	for i := range jobs {
		j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":"bench-%d","body":{"model":"m","messages":[{"role":"user","content":"%s"}],"max_tokens":16}}`,
			i, strings.Repeat("Summarise this sentence in five words. ", 5))), llmq.DecodeOptions{})
		require.NoError(b, err)
		jobs[i] = j
	}
	b.ResetTimer()
	for len(jobs) > 0 {
		batch := jobs[:min(1000, len(jobs))]
		jobs = jobs[len(batch):]
		if _, err := s.InsertOutbox(ctx, batch); err != nil {
			b.Fatal(err)
		}
		keys := make([]store.Key, len(batch))
		for i, j := range batch {
			keys[i] = store.Key{Tenant: j.Tenant, ID: j.ID}
		}
		if err := s.MarkPublished(ctx, keys); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
