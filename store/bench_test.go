package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

// BenchmarkJobLifecycle measures one job's path through the store as the
// worker drives it, in batches of 256 as the worker makes them: Ingest and
// Claim once per batch, then MarkCalling and StoreResult per job (with the
// call's row in job_attempts and its answer, as the worker writes them).
// It reports how many of a job's updates were heap-only (HOT) and the
// heap of table jobs (without its indexes) per job.
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
		if _, err := s.Queue().Ingest(ctx, batch); err != nil {
			b.Fatal(err)
		}
		recs, err := s.Queue().Claim(ctx, store.ClaimRequest{Model: "m", Owner: "bench", Lease: time.Minute, Limit: len(batch)})
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range recs {
			n, err := s.Queue().MarkCalling(ctx, r.Lease(), store.PolicyState{Call: store.Call{Model: "m", QuotaWait: time.Millisecond}})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Queue().StoreResult(ctx, r.Key(), store.Result{Response: resp, UsedModel: "m", PromptTokens: 5, CompletionTokens: 1,
				Answered: &store.Answer{Attempt: n, At: time.Now(), Status: 200, Outcome: "success", PromptTokens: 5, CompletionTokens: 1}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	_, hot := storetest.Updates(b, s.Pool(), "jobs")
	b.ReportMetric(float64(hot)/float64(b.N), "hot/job")
	var heap int64
	require.NoError(b, s.Pool().QueryRow(ctx, `SELECT pg_relation_size('jobs')`).Scan(&heap))
	b.ReportMetric(float64(heap)/float64(b.N), "heap-B/job")
}

// BenchmarkGroupWrites measures the Postgres CPU per job of a job's
// writes, as the worker makes them: 512 jobs at a time are ingested (one
// statement, ingest-pg-µs/job) and claimed (256 at a time,
// claim-pg-µs/job), then each records its call (MarkCalling,
// call-pg-µs/job) and, once every call is recorded, its result with the
// call's answer (StoreResult, result-pg-µs/job), from 512 goroutines at
// once, so the group committer's flushes merge them. The CPU is the backends' (storetest.BackendCPU): unlike a rate,
// it barely moves with the load of a shared machine.
func BenchmarkGroupWrites(b *testing.B) {
	ctx := context.Background()
	s, err := store.Open(ctx, storetest.NewDB(b))
	require.NoError(b, err)
	defer s.Close()
	resp := json.RawMessage(`{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,` +
		`"message":{"role":"assistant","content":"Five words summarise this sentence."},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":50,"completion_tokens":8,"total_tokens":58}}`)
	const chunk = 512
	var ingest, claim, call, result time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += chunk {
		n := min(chunk, b.N-done)
		jobs := make([]store.NewJob, n)
		for i := range jobs {
			j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":"bench-%d","body":{"model":"m","messages":[{"role":"user",`+
				`"content":"%s"}],"max_tokens":32}}`, done+i, strings.Repeat("Summarise this sentence in five words. ", 5))),
				llmq.DecodeOptions{})
			require.NoError(b, err)
			jobs[i] = store.NewJob{Job: j, EstPromptTokens: 50, EstOutputTokens: 32}
		}
		cpu0 := storetest.BackendCPU(b, s.Pool())
		_, err := s.Queue().Ingest(ctx, jobs)
		require.NoError(b, err)
		cpu1 := storetest.BackendCPU(b, s.Pool())
		var recs []*store.JobRecord
		for len(recs) < n {
			got, err := s.Queue().Claim(ctx, store.ClaimRequest{Model: "m", Owner: "bench", Lease: time.Minute, Limit: 256})
			require.NoError(b, err)
			recs = append(recs, got...)
		}
		cpu2 := storetest.BackendCPU(b, s.Pool())
		attempts := make([]int, n)
		var g errgroup.Group
		for i, r := range recs {
			g.Go(func() (err error) {
				attempts[i], err = s.Queue().MarkCalling(ctx, r.Lease(), store.PolicyState{Call: store.Call{Model: "m", QuotaWait: time.Millisecond}})
				return err
			})
		}
		require.NoError(b, g.Wait())
		cpu3 := storetest.BackendCPU(b, s.Pool())
		for i, r := range recs {
			g.Go(func() error {
				_, err := s.Queue().StoreResult(ctx, r.Key(), store.Result{Response: resp, UsedModel: "m", PromptTokens: 50, CompletionTokens: 8,
					Answered: &store.Answer{Attempt: attempts[i], At: time.Now(), Status: 200, Outcome: "success", PromptTokens: 50,
						CompletionTokens: 8}})
				return err
			})
		}
		require.NoError(b, g.Wait())
		cpu4 := storetest.BackendCPU(b, s.Pool())
		ingest, claim, call, result = ingest+cpu1-cpu0, claim+cpu2-cpu1, call+cpu3-cpu2, result+cpu4-cpu3
	}
	b.StopTimer()
	b.ReportMetric(float64(ingest.Microseconds())/float64(b.N), "ingest-pg-µs/job")
	b.ReportMetric(float64(claim.Microseconds())/float64(b.N), "claim-pg-µs/job")
	b.ReportMetric(float64(call.Microseconds())/float64(b.N), "call-pg-µs/job")
	b.ReportMetric(float64(result.Microseconds())/float64(b.N), "result-pg-µs/job")
}

// BenchmarkClaim measures one claim of 8 jobs, as a scheduler makes them
// while a quota binds, from a backlog of 10,000 queued jobs of one model
// spread over tenants (the claim's cost grows with the tenants that have
// jobs queued, not with the backlog), counted in jobs alone or bounded in
// tokens too (a room all 8 fit, as the scheduler's claims are while the
// TPM binds).
func BenchmarkClaim(b *testing.B) {
	for _, c := range []struct {
		tenants int
		room    float64
	}{{1, 0}, {4, 0}, {32, 0}, {1, 1e9}, {32, 1e9}} {
		tenants := c.tenants
		b.Run(fmt.Sprintf("tenants=%d/room=%g", tenants, c.room), func(b *testing.B) {
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
					_, err := s.Queue().Ingest(ctx, jobs[:min(256, len(jobs))])
					require.NoError(b, err)
					jobs = jobs[min(256, len(jobs)):]
				}
			}
			add(0, backlog)
			_, err = s.Pool().Exec(ctx, `ANALYZE jobs`)
			require.NoError(b, err)
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.Queue().Claim(ctx, store.ClaimRequest{Model: "m", Owner: "bench", Lease: time.Minute, Limit: limit, TokenRoom: c.room}); err != nil {
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
// a job needs, the ceiling of the producer before any broker): batches of
// 1,000 jobs as produce's flushes send them, from 4 writers at once (as
// transporttest.BenchPublish's 4 publishers measure the broker's side).
// "published" is what a flush writes: InsertOutboxPublishing, one insert
// of rows marked published, committed once the publish (here none)
// returns; "marked" the older path a failed publish's sweep still takes,
// InsertOutbox then MarkPublished.
func BenchmarkOutbox(b *testing.B) {
	b.Run("published", func(b *testing.B) { benchOutbox(b, publishedOutbox) })
	b.Run("marked", func(b *testing.B) { benchOutbox(b, markedOutbox) })
}

func benchOutbox(b *testing.B, write func(context.Context, *store.Store, []store.NewJob) error) {
	ctx := context.Background()
	s, err := store.Open(ctx, storetest.NewDB(b))
	require.NoError(b, err)
	defer s.Close()
	jobs := make([]store.NewJob, b.N)
	for i := range jobs {
		j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":"bench-%d","body":{"model":"m","messages":[{"role":"user","content":"%s"}],"max_tokens":16}}`,
			i, strings.Repeat("Summarise this sentence in five words. ", 5))), llmq.DecodeOptions{})
		require.NoError(b, err)
		jobs[i] = store.NewJob{Job: j}
	}
	batches := make(chan []store.NewJob, len(jobs)/1000+1)
	for len(jobs) > 0 {
		batches <- jobs[:min(1000, len(jobs))]
		jobs = jobs[min(1000, len(jobs)):]
	}
	close(batches)
	b.ResetTimer()
	var g errgroup.Group
	for range 4 {
		g.Go(func() error {
			for batch := range batches {
				if err := write(ctx, s, batch); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

func publishedOutbox(ctx context.Context, s *store.Store, batch []store.NewJob) error {
	_, err := s.Outbox().InsertOutboxPublishing(ctx, batch, func([]store.Recorded) error { return nil })
	return err
}

func markedOutbox(ctx context.Context, s *store.Store, batch []store.NewJob) error {
	if _, err := s.Outbox().InsertOutbox(ctx, batch); err != nil {
		return err
	}
	keys := make([]store.Key, len(batch))
	for i, j := range batch {
		keys[i] = store.Key{Tenant: j.Job.Tenant, ID: j.Job.ID}
	}
	return s.Outbox().MarkPublished(ctx, keys)
}

// BenchmarkModelStats measures GET /v1/stats/models' read of an hour of
// calls (the console's overview asks it at each refresh): 100,000 calls
// of 3 models, a call a job.
func BenchmarkModelStats(b *testing.B) {
	ctx := context.Background()
	s, err := store.Open(ctx, storetest.NewDB(b))
	require.NoError(b, err)
	defer s.Close()
	const calls = 100_000
	now := time.Now()
	_, err = s.Pool().Exec(ctx, `INSERT INTO jobs (tenant, id, status, priority, requested_model, body, created_at, updated_at,
			sched_key, finished_at)
		SELECT 't' || (i % 4), 'j' || i, 'succeeded', 'normal', 'm' || (i % 3), '{}', $1, $1, $1, $1
		FROM generate_series(1, $2) AS i`, now, calls)
	require.NoError(b, err)
	_, err = s.Pool().Exec(ctx, `INSERT INTO job_attempts (tenant, job_id, seq, attempt, model, started_at, quota_wait_ms,
			finished_at, status, outcome, prompt_tokens, completion_tokens, limit_requests)
		SELECT 't' || (i % 4), 'j' || i, 1, 1, 'm' || (i % 3), $1::timestamptz - (i % 3600) * interval '1 second', i % 500,
			$1::timestamptz - (i % 3600) * interval '1 second' + interval '1 second',
			CASE WHEN i % 10 = 0 THEN 429 ELSE 200 END, CASE WHEN i % 10 = 0 THEN 'rate_limited' ELSE 'success' END,
			50, 20, 500
		FROM generate_series(1, $2) AS i`, now, calls)
	require.NoError(b, err)
	_, err = s.Pool().Exec(ctx, `ANALYZE job_attempts`)
	require.NoError(b, err)
	b.ResetTimer()
	for range b.N {
		stats, err := s.Jobs().ModelStats(ctx, "", now.Add(-time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		if len(stats) != 3 {
			b.Fatalf("%d models", len(stats))
		}
	}
}

// routedJobsDone opens a store on a database of its own holding n jobs
// bench-1..n that succeeded at start with a reply queue as their route.
func routedJobsDone(b *testing.B, start time.Time, n int) *store.Store {
	b.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, storetest.NewDB(b))
	require.NoError(b, err)
	b.Cleanup(s.Close)
	_, err = s.Pool().Exec(ctx, `INSERT INTO jobs (tenant, id, status, requested_model, body, result, sched_key, reply, finished_at)
		SELECT 'default', 'bench-' || i, 'succeeded', 'm', '{"model":"m"}', '{"id":"chatcmpl-1","choices":[]}', $1, '{"to":"results"}', $1
		FROM generate_series(1, $2) i`, start, n)
	require.NoError(b, err)
	return s
}

// BenchmarkNotificationsClaim measures one claim of 256 result events, as
// a notifier makes it, from an outbox holding a backlog of due events (a
// broker back after an outage): each claim counts an attempt on its rows
// and reads their jobs; the next, a lease later, may take them again.
func BenchmarkNotificationsClaim(b *testing.B) {
	for _, backlog := range []int{1_000, 20_000, 200_000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) {
			ctx, start := context.Background(), time.Now()
			s := routedJobsDone(b, start, backlog)
			_, err := s.Pool().Exec(ctx, `INSERT INTO notifications (tenant, job_id, status, reply, created_at, retry_since, next_attempt_at)
				SELECT 'default', 'bench-' || i, 'succeeded', '{"to":"results"}', $1, $1, $1 FROM generate_series(1, $2) i`, start, backlog)
			require.NoError(b, err)
			_, err = s.Pool().Exec(ctx, `ANALYZE jobs, notifications`)
			require.NoError(b, err)
			b.ResetTimer()
			for i := range b.N {
				claimed, err := s.Notifications().Claim(ctx, start.Add(time.Duration(i+1)*time.Second), time.Millisecond, 256)
				if err != nil {
					b.Fatal(err)
				}
				if len(claimed) != min(256, backlog) {
					b.Fatalf("claimed %d", len(claimed))
				}
			}
		})
	}
}

// BenchmarkNotificationsClaimBatches is BenchmarkNotificationsClaim on a
// backlog of batches of 60 events (one per statement that ended jobs, at
// saturation): each claim takes the first five. WAL-B/op is the write-ahead
// log a claim writes, mostly its row locks and updates.
func BenchmarkNotificationsClaimBatches(b *testing.B) {
	const perBatch = 60
	for _, backlog := range []int{200, 2_000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) {
			ctx, start := context.Background(), time.Now()
			s := routedJobsDone(b, start, backlog*perBatch)
			_, err := s.Pool().Exec(ctx, `INSERT INTO notification_batches (created_at, event_ids, tenants, job_ids, statuses, replies)
				SELECT $1, array_agg(gen_random_uuid()), array_agg('default'::text), array_agg('bench-' || i), array_agg('succeeded'::text),
					array_agg('{"to":"results"}'::jsonb)
				FROM generate_series(1, $2) i GROUP BY (i - 1) / $3 ORDER BY (i - 1) / $3`, start, backlog*perBatch, perBatch)
			require.NoError(b, err)
			_, err = s.Pool().Exec(ctx, `ANALYZE jobs, notification_batches`)
			require.NoError(b, err)
			walBytes := func() (n int64) { // the server's, every database's: run alone
				require.NoError(b, s.Pool().QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&n))
				return n
			}
			wal := walBytes()
			b.ResetTimer()
			for i := range b.N {
				claimed, err := s.Notifications().Claim(ctx, start.Add(time.Duration(i+1)*time.Second), time.Millisecond, 256)
				if err != nil {
					b.Fatal(err)
				}
				if len(claimed) != 5*perBatch {
					b.Fatalf("claimed %d", len(claimed))
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(walBytes()-wal)/float64(b.N), "WAL-B/op")
		})
	}
}
