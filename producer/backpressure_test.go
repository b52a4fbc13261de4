package producer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// ingest does what a worker's ingest does with n messages of the broker:
// their jobs are in Postgres (the producer recorded them), the messages
// are acked.
func (b *testBundle) ingest(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	if b.msgs == nil {
		msgs, err := b.sub.Consume(ctx)
		require.NoError(t, err)
		b.msgs = msgs
	}
	for range n {
		require.NoError(t, receive(t, b.msgs).Ack(ctx))
	}
}

// claim claims n queued jobs of the producer's model for worker "w".
func (b *testBundle) claim(t *testing.T, n int) []*store.JobRecord {
	t.Helper()
	recs, err := b.store.Queue().Claim(context.Background(), store.ClaimRequest{Model: "gpt-4o-mini", Owner: "w", Lease: time.Minute, Limit: n})
	require.NoError(t, err)
	require.Len(t, recs, n)
	return recs
}

// work ingests, claims and finishes n jobs the producer published.
func (b *testBundle) work(t *testing.T, n int) {
	t.Helper()
	b.ingest(t, n)
	for _, rec := range b.claim(t, n) {
		_, err := b.store.Queue().StoreResult(context.Background(), rec.Key(), store.Result{Response: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
}

// TestBackpressureCountsPostgres: the depth counts the jobs queued in
// Postgres and in flight as well as the broker's messages, each job once:
// ingested (the broker empty), the backlog is still 4 jobs, as it is with
// one of them running.
func TestBackpressureCountsPostgres(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, func(c *producer.Config) { c.SoftDepth, c.HardDepth = 4, 100 })
	ctx := context.Background()
	for i := range 4 {
		_, _, err := p.Publish(ctx, newJob(fmt.Sprintf("j%d", i)))
		require.NoError(t, err)
	}
	q, err := p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, [4]int64{4, 4, 4, 0}, [4]int64{q.Depth, q.Lag, q.Queued, q.InFlight}, "published, not ingested: once")
	require.Equal(t, producer.StateThrottled, q.State)

	b.ingest(t, 4)
	q, err = p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, [4]int64{4, 0, 4, 0}, [4]int64{q.Depth, q.Lag, q.Queued, q.InFlight}, "ingested: queued in Postgres")
	require.Equal(t, producer.StateThrottled, q.State)

	b.claim(t, 1)
	q, err = p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, [4]int64{4, 0, 3, 1}, [4]int64{q.Depth, q.Lag, q.Queued, q.InFlight}, "one running")

	// A message published to the broker directly (not through the
	// producer) is not in Postgres yet: the larger figure counts.
	require.NoError(t, b.broker.NewPublisher().Publish(ctx, b.dest, make([]transport.Message, 5)...))
	q, err = p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, [4]int64{6, 5, 3, 1}, [4]int64{q.Depth, q.Lag, q.Queued, q.InFlight})
}

// TestBackpressureCountsUpToHardDepth: the jobs queued in Postgres are
// counted up to the hard depth and no further (a count of a whole backlog
// of 1,000,000 jobs costs Postgres 55 ms to 0.5 s per probe): the state is
// rejecting either way.
func TestBackpressureCountsUpToHardDepth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fill := b.producer(t, func(c *producer.Config) { c.SoftDepth, c.HardDepth = 50, 100 })
	ctx := context.Background()
	for i := range 5 {
		_, _, err := fill.Publish(ctx, newJob(fmt.Sprintf("j%d", i)))
		require.NoError(t, err)
	}
	b.ingest(t, 5)
	p := b.producer(t, func(c *producer.Config) { c.SoftDepth, c.HardDepth = 2, 3 })
	q, err := p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, [4]int64{3, 0, 3, 0}, [4]int64{q.Depth, q.Lag, q.Queued, q.InFlight}, "5 queued, counted up to 3")
	require.Equal(t, producer.StateRejecting, q.State)
}

// TestBackpressureColdStartAndNoConsumer: before any job finished, the
// drain estimate runs at the configured quotas' rate; once jobs finish, at
// the measured rate of all workers. Jobs that wait NoConsumerAfter with no
// worker consuming (no live lease, no scheduler's model state) are
// reported as no_consumer, without a drain estimate, until a worker takes
// one.
func TestBackpressureColdStartAndNoConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, func(c *producer.Config) {
		c.QuotaRatePerMin, c.RateWindow, c.NoConsumerAfter = 60, time.Minute, 30*time.Second
	})
	ctx := context.Background()
	for i := range 4 {
		_, _, err := p.Publish(ctx, newJob(fmt.Sprintf("j%d", i)))
		require.NoError(t, err)
	}
	b.ingest(t, 4)
	q, err := p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, producer.StateOK, q.State, "no consumer seen yet, for less than NoConsumerAfter")
	require.True(t, q.DrainKnown)
	require.Equal(t, 4*time.Second, q.EstimatedDrain, "4 jobs at the quota's 60/min")
	require.Zero(t, q.CompletionRatePerMin, "the measured rate stays the measure")

	b.clock.Advance(29 * time.Second)
	q, err = p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, producer.StateOK, q.State)
	b.clock.Advance(time.Second)
	q, err = p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, producer.StateNoConsumer, q.State, "30 s with jobs waiting and no worker")
	require.False(t, q.DrainKnown)
	require.Zero(t, q.EstimatedDrain)
	_, _, err = p.Publish(ctx, newJob("still-accepted"))
	require.NoError(t, err, "jobs are accepted: they wait for a worker")
	b.ingest(t, 1)

	// A worker takes a job: it is consuming (its lease is live).
	b.claim(t, 1)
	q, err = p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, producer.StateOK, q.State)
	require.Equal(t, 5*time.Second, q.EstimatedDrain, "5 jobs at the quota's rate: none finished yet")

	// Its scheduler holding the rest back counts too once the lease is
	// gone.
	finish(t, b, 3) // 3/min over the last minute
	b.clock.Advance(time.Minute - time.Second)
	require.NoError(t, b.store.Queue().SetModelState(ctx, store.ModelState{Model: "gpt-4o-mini", WaitingReason: store.WaitingReasonProviderQuota, Worker: "w"}))
	q, err = p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, producer.StateOK, q.State)
	require.Equal(t, 100*time.Second, q.EstimatedDrain, "5 jobs at the measured 3/min: they span the window")
	require.Equal(t, 3.0, q.CompletionRatePerMin)
	// Completions that do not yet span 9/10 of the window: never below the
	// quotas' rate (one job finished a second ago is not one in a minute).
	finish(t, b, 3)
	b.clock.Advance(2 * time.Second)
	q, err = p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, 3.0, q.CompletionRatePerMin, "the first 3 left the window")
	require.Equal(t, 5*time.Second, q.EstimatedDrain, "5 jobs at the quota's 60/min")
}

// heldProbe is a depth probe of 0 that, while hold is set, waits for it to
// be closed; it counts its calls.
type heldProbe struct {
	mu    sync.Mutex
	hold  chan struct{}
	calls int
}

func (h *heldProbe) Depth(ctx context.Context) (int64, error) {
	h.mu.Lock()
	h.calls++
	hold := h.hold
	h.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return 0, nil
}

func (h *heldProbe) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}

// TestAdmissionDoesNotWaitForTheProbe: once the measurement expires, the
// publishes go on with it while one goroutine takes the next (they do not
// all wait for the probe); past ProbeTimeout after the expiry, or after a
// failed publish, they wait for a new one.
func TestAdmissionDoesNotWaitForTheProbe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	probe := &heldProbe{}
	p := b.producer(t, func(c *producer.Config) { c.DepthProbe, c.DepthTTL, c.ProbeTimeout = probe, time.Second, time.Second })
	ctx := context.Background()
	within := func(id string) error {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			_, _, err := p.Publish(ctx, newJob(id))
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("publish of %s waited for the probe", id)
			return nil
		}
	}
	require.NoError(t, within("first"))
	require.Equal(t, 1, probe.count())

	release := make(chan struct{})
	probe.mu.Lock()
	probe.hold = release
	probe.mu.Unlock()
	b.clock.Advance(time.Second) // expired
	for i := range 3 {
		require.NoError(t, within(fmt.Sprintf("stale-%d", i)))
	}
	require.Eventually(t, func() bool { return probe.count() == 2 }, 10*time.Second, time.Millisecond, "one measurement for the three")
	close(release)
	require.NoError(t, p.Drain(ctx))
	require.Equal(t, 2, probe.count())

	// Expired for longer than ProbeTimeout: the publish waits for the probe.
	b.clock.Advance(2*time.Second + time.Millisecond)
	blocked := make(chan struct{})
	probe.mu.Lock()
	probe.hold = blocked
	probe.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, _, err := p.Publish(ctx, newJob("late"))
		done <- err
	}()
	require.Eventually(t, func() bool { return probe.count() == 3 }, 10*time.Second, time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the publish did not wait for the probe: %v", err)
	default:
	}
	close(blocked)
	require.NoError(t, <-done)
}
