package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/worker"
)

// The quota of the replica tests: TPM binds (a job charges about 420
// tokens: 420 a minute by TPM against 600 by RPM), and the provider's
// minute bucket starts full, as OpenAI's does.
const (
	replicaModel = "m"
	replicaRPM   = 600
	replicaTPM   = 24_000
)

func replicaSim() upstreamsim.Config {
	return upstreamsim.Config{
		Seed:    13,
		Models:  map[string]upstreamsim.ModelConfig{replicaModel: {Limits: upstreamsim.Limits{RPM: replicaRPM, TPM: replicaTPM}}},
		Latency: upstreamsim.LatencyConfig{TTFT: 20 * time.Millisecond},
		Output:  upstreamsim.OutputConfig{Distribution: upstreamsim.DistFixed, Min: 1, Max: 1 << 20, Mean: 1 << 20},
	}
}

// replicaConfig runs a worker on the bundle's quota with the ledger, as
// one replica of several on the same API key.
func (tb *testBundle) replicaConfig(c *worker.Config) {
	c.Strategy = shaping.StrategyShape
	c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{replicaModel: {RPM: replicaRPM, TPM: replicaTPM}}}
	c.Ledger = tb.store.Ledger()
	c.QuotaScope = worker.QuotaScopeOf(tb.sim.URL, "sk-test")
	c.LedgerPeriod = 200 * time.Millisecond
	c.LedgerLease = time.Second
}

// backlog publishes n jobs of about 420 tokens each and returns their ids.
func (tb *testBundle) backlog(t *testing.T, prefix string, n int) []string {
	t.Helper()
	var ids []string
	var values [][]byte
	for i := range n {
		id := fmt.Sprintf("%s-%03d", prefix, i)
		ids = append(ids, id)
		values = append(values, []byte(fmt.Sprintf(`{"id":%q,"body":{"model":%q,"max_tokens":400,"messages":[{"role":"user","content":"Tell story %s"}]}}`,
			id, replicaModel, id)))
	}
	tb.publish(t, values...)
	return ids
}

// rateLimited is the simulator's 429 count.
func (tb *testBundle) rateLimited() int64 {
	var n int64
	for _, v := range tb.sim.Sim.Stats().Total.RateLimited {
		n += v
	}
	return n
}

// TestReplicasShareOneQuota runs three workers on one API key, each
// configured with the key's whole quota, over a backlog larger than the
// provider's minute bucket: through the ledger they spend it as one worker
// would, without a 429 storm, and each runs on about a third.
func TestReplicasShareOneQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("a backlog of about 20 s")
	}
	t.Parallel()
	tb := setup(t, replicaSim())
	for range 3 {
		tb.start(t, tb.replicaConfig)
	}
	// Every replica is in the ledger before the jobs land.
	require.Eventually(t, func() bool {
		var n int
		err := tb.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM quota_ledger`).Scan(&n)
		return err == nil && n == 3
	}, 10*time.Second, 20*time.Millisecond)

	ids := tb.backlog(t, "r", 75) // ~31,500 tokens: the bucket, then ~19 s of refill
	recs := tb.waitTerminal(t, ids, 90*time.Second)
	for _, id := range ids {
		require.Equal(t, llmq.StatusSucceeded, recs[id].Status, "%s: %s", id, recs[id].ErrorMessage)
	}
	var n int
	require.NoError(t, tb.store.Pool().QueryRow(context.Background(), `SELECT count(DISTINCT lease_owner) FROM jobs`).Scan(&n))
	require.Equal(t, 3, n, "every replica ran jobs")
	stats := tb.sim.Sim.Stats()
	calls := stats.Total.Accepted + tb.rateLimited()
	require.LessOrEqual(t, tb.rateLimited(), int64(1), "at most one 429 in %d calls", calls)
}

// TestReplicaRestartedMidBacklogDoesNotOverspend stops a worker once the
// provider's bucket is spent and starts another on the same key at once:
// the new one starts from what the provider says remains (its probe, and
// the headers), not from a full minute of its own.
func TestReplicaRestartedMidBacklogDoesNotOverspend(t *testing.T) {
	if testing.Short() {
		t.Skip("a backlog of about 15 s")
	}
	t.Parallel()
	tb := setup(t, replicaSim())
	first, err := worker.New(tb.workerConfig(t, tb.replicaConfig))
	require.NoError(t, err)
	require.NoError(t, first.Start(context.Background()))
	ids := tb.backlog(t, "s", 70) // ~29,400 tokens
	// The bucket (24,000 tokens, about 57 jobs) is spent at once.
	require.Eventually(t, func() bool { return tb.count(t, `status = 'succeeded'`) >= 50 }, 30*time.Second, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, first.Stop(ctx))
	// One 429 a run is what the goal allows a worker on a bucket provider
	// (under a loaded machine an answer's headers can land after the next
	// send was sized); a worker that spent the bucket blindly would get
	// many.
	before := tb.rateLimited()
	require.LessOrEqual(t, before, int64(1), "at most one 429 before the restart")
	tb.start(t, tb.replicaConfig)
	recs := tb.waitTerminal(t, ids, 60*time.Second)
	for _, id := range ids {
		require.Equal(t, llmq.StatusSucceeded, recs[id].Status, "%s: %s", id, recs[id].ErrorMessage)
	}
	// The restarted worker's probe meets a spent bucket: its 429 is what
	// learning the provider costs (and, seldom, one more before the
	// refusal's headers are applied). A worker that trusted its own full
	// minute would be refused the whole of it.
	require.LessOrEqual(t, tb.rateLimited()-before, int64(2), "the restarted worker spends what remains, no more")
}

// TestReplicasHoldAShortBucket runs three workers on one API key of a
// provider that enforces a bucket of 5 s, over a backlog in which one job
// in five is a document larger than a third of that bucket: once they
// have learned the bucket from 429s, one replica holds the whole quota and
// the others none (shaping.ReplicaShare), so no two send documents into
// the same few seconds: at most one 429 from then on (on thirds, borrowing
// from each other's parts, they met 2 in a run). The learning itself,
// while they still run on their parts, cost 2 to 9 in four runs, before
// and after. The jobs a replica claimed before it lost the quota run when
// the holder idles: every job succeeds.
func TestReplicasHoldAShortBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("a backlog of about 30 s")
	}
	// Not parallel: a count of 429s that the timing of three replicas'
	// sends decides, which the suite's load moves: run beside the
	// package's other tests it met 2 and, once, 3 after learning; alone,
	// beside spinning processes, pgbench or copies of itself, none in 27
	// runs. Should it fail, the refused calls are logged.
	const rpm, tpm = 600, 60_000
	sim := replicaSim()
	sim.Models = map[string]upstreamsim.ModelConfig{replicaModel: {Limits: upstreamsim.Limits{RPM: rpm, TPM: tpm}}}
	sim.Enforcement = upstreamsim.EnforcementShort
	tb := setup(t, sim)
	for range 3 {
		tb.start(t, func(c *worker.Config) {
			tb.replicaConfig(c)
			c.Catalog = llmq.Catalog{Models: map[string]llmq.Model{replicaModel: {RPM: rpm, TPM: tpm}}}
		})
	}
	ledgerRows := func(where string) int {
		var n int
		require.NoError(t, tb.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM quota_ledger `+where).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return ledgerRows("") == 3 }, 10*time.Second, 20*time.Millisecond)

	var ids []string
	var values [][]byte
	for i := range 40 {
		id := fmt.Sprintf("h-%03d", i)
		maxTokens := 400
		if i%5 == 0 {
			maxTokens = 2500 // a document: more than a third of the 5,000-token bucket
		}
		ids = append(ids, id)
		values = append(values, []byte(fmt.Sprintf(`{"id":%q,"body":{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":"Tell story %s"}]}}`,
			id, replicaModel, maxTokens, id)))
	}
	tb.publish(t, values...) // ~33,000 tokens: the bucket, then ~28 s of refill
	require.Eventually(t, func() bool { return ledgerRows("WHERE short_tokens > 0") == 3 }, 30*time.Second, 20*time.Millisecond,
		"every replica learns the short bucket")
	learning, learned := tb.rateLimited(), time.Now()
	recs := tb.waitTerminal(t, ids, 120*time.Second)
	for _, id := range ids {
		require.Equal(t, llmq.StatusSucceeded, recs[id].Status, "%s: %s", id, recs[id].ErrorMessage)
	}
	calls := tb.sim.Sim.Stats().Total.Accepted + tb.rateLimited()
	t.Logf("%d 429s in %d calls, %d of them while the replicas learned the short bucket", tb.rateLimited(), calls, learning)
	if tb.rateLimited()-learning > 1 {
		tb.logRefusals(t, learned)
	}
	require.LessOrEqual(t, tb.rateLimited()-learning, int64(1), "at most one 429 once the short bucket is known, in %d calls", calls)
}

// logRefusals logs every refused call, its job's replica and the call's
// start after since, for a count of 429s that failed.
func (tb *testBundle) logRefusals(t *testing.T, since time.Time) {
	t.Helper()
	rows, err := tb.store.Pool().Query(context.Background(), `SELECT a.job_id, a.seq, j.lease_owner,
			extract(epoch FROM a.started_at - $1::timestamptz)::float8, a.quota_wait_ms, j.est_output_tokens
		FROM job_attempts a JOIN jobs j ON j.tenant = a.tenant AND j.id = a.job_id
		WHERE a.outcome = 'rate_limited' ORDER BY a.started_at`, since)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var job, owner string
		var seq int
		var after float64
		var wait, outTokens int64
		require.NoError(t, rows.Scan(&job, &seq, &owner, &after, &wait, &outTokens))
		t.Logf("429: %s call %d by %s, %+.3f s after the short bucket was known, %d ms waited, %d output tokens estimated", job, seq, owner, after, wait, outTokens)
	}
	require.NoError(t, rows.Err())
}
