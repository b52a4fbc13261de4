package store_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

// BenchmarkRenewQuotas measures one replica's ledger round (RenewQuotas of
// one model's key) among n live replicas: each round reads the n rows of
// the key. pg-cpu-us/op is Postgres's CPU per round (docs/design/scale.md).
func BenchmarkRenewQuotas(b *testing.B) {
	for _, n := range []int{3, 30, 100} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			ctx := context.Background()
			s, err := store.Open(ctx, storetest.NewDB(b))
			require.NoError(b, err)
			defer s.Close()
			claim := []store.QuotaClaim{{Key: "https://api.example key:00 m", Demand: 10, Share: 1 / float64(n)}}
			for i := range n {
				_, err := s.Ledger().RenewQuotas(ctx, fmt.Sprintf("r%03d", i), time.Hour, claim)
				require.NoError(b, err)
			}
			cpu0 := storetest.BackendCPU(b, s.Pool())
			b.ResetTimer()
			for range b.N {
				rows, err := s.Ledger().RenewQuotas(ctx, "r000", time.Hour, claim)
				if err != nil || len(rows) != n {
					b.Fatal(err, len(rows))
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((storetest.BackendCPU(b, s.Pool())-cpu0).Microseconds())/float64(b.N), "pg-cpu-us/op")
		})
	}
}

// BenchmarkClaimSchedulers measures the claim of n schedulers on one
// model at once (FOR UPDATE SKIP LOCKED: each skips the rows the others
// hold), 8 jobs a claim, from a backlog of 20,000: Postgres's CPU per
// job claimed (docs/design/scale.md).
func BenchmarkClaimSchedulers(b *testing.B) {
	for _, n := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("schedulers=%d", n), func(b *testing.B) {
			ctx := context.Background()
			s, err := store.Open(ctx, storetest.NewDB(b))
			require.NoError(b, err)
			defer s.Close()
			const backlog, limit = 20_000, 8
			jobs := make([]store.NewJob, backlog)
			for i := range jobs {
				j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":"bench-%d","body":{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":16}}`, i)),
					llmq.DecodeOptions{})
				require.NoError(b, err)
				jobs[i] = store.NewJob{Job: j, EstPromptTokens: 8, EstOutputTokens: 16}
			}
			for len(jobs) > 0 {
				_, err := s.Queue().Ingest(ctx, jobs[:min(256, len(jobs))])
				require.NoError(b, err)
				jobs = jobs[min(256, len(jobs)):]
			}
			_, err = s.Pool().Exec(ctx, `ANALYZE jobs`)
			require.NoError(b, err)
			claims := min(b.N, backlog/limit)
			var next, claimed atomic.Int64
			cpu0 := storetest.BackendCPU(b, s.Pool())
			b.ResetTimer()
			var g errgroup.Group
			for w := range n {
				g.Go(func() error {
					for next.Add(1) <= int64(claims) {
						got, err := s.Queue().Claim(ctx, store.ClaimRequest{Model: "m", Owner: fmt.Sprintf("w%d", w), Lease: time.Minute, Limit: limit})
						if err != nil {
							return err
						}
						claimed.Add(int64(len(got)))
					}
					return nil
				})
			}
			require.NoError(b, g.Wait())
			b.StopTimer()
			cpu := storetest.BackendCPU(b, s.Pool()) - cpu0
			b.ReportMetric(float64(cpu.Microseconds())/float64(max(1, claimed.Load())), "pg-cpu-us/job")
			b.ReportMetric(float64(claimed.Load())/float64(claims), "jobs/claim")
		})
	}
}
