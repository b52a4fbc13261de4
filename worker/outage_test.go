package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/chaos"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
	"github.com/llmq/llmq/worker"
)

// Outages: a proxy (internal/chaos) between the worker and Postgres or
// RabbitMQ is cut and restored; the machine's services stay up for the
// other tests.

// proxied returns a proxy to rawURL's host and rawURL with the proxy in its
// place.
func proxied(t *testing.T, rawURL string) (*chaos.Proxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	p, err := chaos.New(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	u.Host = p.Addr()
	return p, u.String()
}

// outage cuts p for d of real time, the outage the test is about.
func outage(p *chaos.Proxy, d time.Duration) {
	p.Cut()
	<-time.After(d)
	p.Restore()
}

// TestWorkerPostgresOutage cuts Postgres for 10 s in the middle of 600
// jobs: every job succeeds, and the simulator counts exactly 600 calls: no
// job was called again once its call had answered (answers that came back
// while the database was away were kept and stored once it was back).
func TestWorkerPostgresOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10 s outage; skipped with -short")
	}
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 41, Latency: upstreamsim.LatencyConfig{TTFT: 50 * time.Millisecond},
		Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	pg, dbURL := proxied(t, tb.dbURL)
	st, err := store.Open(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	tb.start(t, func(c *worker.Config) { c.Store = st.Queue() })
	const n = 600
	ids := make([]string, n)
	values := make([][]byte, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("pg-%03d", i)
		values[i] = jobJSON(ids[i], "m", "")
	}
	tb.publish(t, values...)
	require.Eventually(t, func() bool { return tb.count(t, `status = 'succeeded'`) >= n/3 }, time.Minute, 10*time.Millisecond)
	outage(pg, 10*time.Second)
	recs := tb.waitTerminal(t, ids, 2*time.Minute)
	for _, id := range ids {
		require.Equal(t, llmq.StatusSucceeded, recs[id].Status, id)
	}
	require.EqualValues(t, n, tb.sim.Sim.Stats().Total.Accepted, "every call answered: none was made twice")
	require.Equal(t, n, tb.count(t, `result IS NOT NULL`))
	// A call recorded while the connection broke after the commit is
	// counted again when the record is retried: attempts may count one
	// call more, never fewer.
	require.Equal(t, n, tb.count(t, `attempts BETWEEN 1 AND 2`))
}

// losesAClaim is a job store whose first claim that takes jobs is written
// and then answered with a broken connection, as when the connection
// breaks while a claim's answer comes back.
type losesAClaim struct {
	worker.JobStore
	lost atomic.Int32 // the jobs that claim took
}

func (s *losesAClaim) ClaimWithin(ctx context.Context, r store.ClaimRequest) ([]*store.JobRecord, bool, error) {
	recs, left, err := s.JobStore.ClaimWithin(ctx, r)
	if err != nil || len(recs) == 0 || !s.lost.CompareAndSwap(0, int32(len(recs))) {
		return recs, left, err
	}
	return nil, false, &store.UnansweredClaimError{Owner: r.Owner, At: recs[0].UpdatedAt.UTC(), Until: recs[0].LeaseExpiresAt.UTC(),
		Err: errors.New("read tcp: connection reset by peer")}
}

// TestWorkerHandsBackAnUnansweredClaim: the jobs of a claim whose answer
// was lost go back to the queue with the worker's next claim, not when
// their lease ends (ten minutes here), and each is called once.
func TestWorkerHandsBackAnUnansweredClaim(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 43, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	st := &losesAClaim{JobStore: tb.store.Queue()}
	tb.start(t, func(c *worker.Config) { c.Store, c.Lease = st, 10*time.Minute })
	const n = 20
	ids := make([]string, n)
	values := make([][]byte, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("lost-%02d", i)
		values[i] = jobJSON(ids[i], "m", "")
	}
	tb.publish(t, values...)
	recs := tb.waitTerminal(t, ids, time.Minute)
	require.Positive(t, st.lost.Load())
	for _, id := range ids {
		require.Equal(t, llmq.StatusSucceeded, recs[id].Status, id)
	}
	require.EqualValues(t, n, tb.sim.Sim.Stats().Total.Accepted, "one call per job")
}

// TestWorkerRabbitMQOutage cuts the worker's RabbitMQ connection for 10 s
// mid-run: everything finishes, once, and nothing is left in the queue.
func TestWorkerRabbitMQOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10 s outage; skipped with -short")
	}
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 42, Latency: upstreamsim.LatencyConfig{TTFT: 20 * time.Millisecond},
		Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	rmq, brokerURL := proxied(t, tb.brokerURL)
	_, sub, err := open.Open(context.Background(), brokerURL, open.Options{Prefetch: 64, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	tb.start(t, func(c *worker.Config) { c.Subscriber = sub })
	const n = 600
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("rmq-%03d", i)
	}
	// Published in three waves: before, during and after the outage.
	wave := func(from, to int) {
		values := make([][]byte, 0, to-from)
		for _, id := range ids[from:to] {
			values = append(values, jobJSON(id, "m", ""))
		}
		tb.publish(t, values...)
	}
	wave(0, 200)
	require.Eventually(t, func() bool { return tb.count(t, `true`) >= 100 }, time.Minute, 10*time.Millisecond)
	rmq.Cut()
	wave(200, 400)
	<-time.After(10 * time.Second) // the outage
	rmq.Restore()
	wave(400, n)
	recs := tb.waitTerminal(t, ids, 2*time.Minute)
	for _, id := range ids {
		require.Equal(t, llmq.StatusSucceeded, recs[id].Status, id)
	}
	require.EqualValues(t, n, tb.sim.Sim.Stats().Total.Accepted, "one call per job")
	require.Eventually(t, func() bool { return tb.ready(t) == 0 }, 20*time.Second, 10*time.Millisecond, "nothing left in the queue")
	waitDrained(t, sub)
}

// cutCounter counts the calls, and those that start while the provider
// is cut.
type cutCounter struct {
	worker.Upstream
	cut           atomic.Bool
	calls, during atomic.Int32
}

func (c *cutCounter) Call(ctx context.Context, model string, body []byte) worker.Reply {
	c.calls.Add(1)
	if c.cut.Load() {
		c.during.Add(1)
	}
	return c.Upstream.Call(ctx, model, body)
}

// runClock advances clock by step every real millisecond until the test
// ends: the worker's waits (backoff, probes, heartbeats) pass step/1ms
// times faster than the calls and writes, which stay real.
func runClock(t *testing.T, clock *clockwork.FakeClock, step time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				clock.Advance(step)
			}
		}
	}()
}

// TestWorkerProviderOutageCostsNoAttempts cuts the provider (connections
// reset, as a stopped server's) for 60 s of the worker's clock under 300
// jobs: every job succeeds, none is dead-lettered, and the worker makes at
// most 30 calls during the cut: the lane holds its jobs and probes.
func TestWorkerProviderOutageCostsNoAttempts(t *testing.T) {
	t.Parallel()
	// Calls take a second, as an LLM's do, 32 at a time: the calls that
	// start as the cut comes, before the worker knows of it, are few.
	tb := setup(t, upstreamsim.Config{Seed: 45, Latency: upstreamsim.LatencyConfig{TTFT: time.Second},
		Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	provider, simURL := proxied(t, tb.sim.URL)
	up := &cutCounter{Upstream: upstreamAt(simURL, 5*time.Second)}
	clock := clockwork.NewFakeClock()
	tb.start(t, func(c *worker.Config) { c.Upstream, c.Clock, c.MaxInFlight = up, clock, 32 })
	runClock(t, clock, 10*time.Millisecond)
	const n = 300
	ids := make([]string, n)
	values := make([][]byte, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("cut-%03d", i)
		values[i] = jobJSON(ids[i], "m", "")
	}
	tb.publish(t, values...)
	require.Eventually(t, func() bool { return tb.count(t, `status = 'succeeded'`) >= n/3 }, time.Minute, 5*time.Millisecond)
	up.cut.Store(true)
	provider.Cut()
	cutAt := clock.Now()
	require.Eventually(t, func() bool { return clock.Since(cutAt) >= time.Minute }, time.Minute, time.Millisecond)
	provider.Restore()
	up.cut.Store(false)
	require.Less(t, tb.count(t, `status = 'succeeded'`), n, "the cut came before the end")

	recs := tb.waitTerminal(t, ids, 2*time.Minute)
	for _, id := range ids {
		require.Equal(t, llmq.StatusSucceeded, recs[id].Status, "%s: %s %s", id, recs[id].ErrorCode, recs[id].ErrorMessage)
	}
	require.Empty(t, tb.letters.all())
	t.Logf("%d calls during the cut", up.during.Load())
	require.LessOrEqual(t, up.during.Load(), int32(30), "probes, not a storm")
}

// TestWorkerOutageCallsCostNoAttempts: one job with 2 attempts meets a 60 s
// outage (on the worker's clock) that fails its calls at least 5 times (the
// first call, the probe at once, then one every 15 s): it succeeds after,
// its attempts counting every call. With an outage limit of 10 s, the
// probes after it count: the job is dead-lettered at its second.
func TestWorkerOutageCallsCostNoAttempts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		limit time.Duration
		want  llmq.Status
	}{
		{"within the outage limit", 0, llmq.StatusSucceeded},
		{"past the outage limit", 10 * time.Second, llmq.StatusDeadLettered},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, upstreamsim.Config{Seed: 46})
			provider, simURL := proxied(t, tb.sim.URL)
			up := &cutCounter{Upstream: upstreamAt(simURL, 5*time.Second)}
			clock := clockwork.NewFakeClock()
			tb.start(t, func(c *worker.Config) { c.Upstream, c.Clock, c.MaxAttempts, c.OutageLimit = up, clock, 2, tt.limit })
			up.cut.Store(true)
			provider.Cut()
			cutAt := clock.Now()
			runClock(t, clock, 10*time.Millisecond)
			tb.publish(t, jobJSON("alone", "m", ""))
			require.Eventually(t, func() bool { return clock.Since(cutAt) >= time.Minute }, time.Minute, time.Millisecond)
			provider.Restore()
			up.cut.Store(false)
			rec := tb.waitTerminal(t, []string{"alone"}, time.Minute)["alone"]
			require.Equal(t, tt.want, rec.Status, "%s %s", rec.ErrorCode, rec.ErrorMessage)
			if tt.want == llmq.StatusDeadLettered {
				letters := tb.letters.all()
				require.Len(t, letters, 1)
				require.Equal(t, dlq.ReasonRetriesExhausted, letters[0].Reason)
				require.Equal(t, 2, letters[0].Attempts)
				return
			}
			require.GreaterOrEqual(t, up.during.Load(), int32(5))
			require.EqualValues(t, up.calls.Load(), rec.Attempts, "every call recorded")
		})
	}
}

// TestWorkerFreeCallsSurviveAClaim: a job with 2 attempts makes at least
// 3 free calls under worker A in an outage; A stops (the job goes back to
// queued, its free calls stored with it). Worker B claims it once the
// provider is back: its 2 paid attempts are whole, so it succeeds on B's
// first call, the free count unchanged.
func TestWorkerFreeCallsSurviveAClaim(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 47})
	provider, simURL := proxied(t, tb.sim.URL)
	clock := clockwork.NewFakeClock()
	a := tb.start(t, func(c *worker.Config) {
		c.Upstream, c.Clock, c.MaxAttempts = upstreamAt(simURL, 5*time.Second), clock, 2
	})
	provider.Cut()
	runClock(t, clock, 10*time.Millisecond)
	tb.publish(t, jobJSON("held", "m", ""))
	require.Eventually(t, func() bool { return tb.count(t, `id = 'held' AND free_attempts >= 3`) == 1 },
		time.Minute, time.Millisecond)
	stopWorker(t, a)
	before := tb.get(t, "held")
	require.Equal(t, llmq.StatusQueued, before.Status)
	require.LessOrEqual(t, before.Attempts-before.FreeAttempts, 1, "a call cut by the stop is paid, no other")

	provider.Restore()
	tb.start(t, func(c *worker.Config) { c.Upstream, c.MaxAttempts = upstreamAt(simURL, 5*time.Second), 2 })
	rec := tb.waitTerminal(t, []string{"held"}, time.Minute)["held"]
	require.Equal(t, llmq.StatusSucceeded, rec.Status, "%s %s", rec.ErrorCode, rec.ErrorMessage)
	require.Equal(t, before.Attempts+1, rec.Attempts, "B made one call")
	require.Equal(t, before.FreeAttempts, rec.FreeAttempts)
	require.Empty(t, tb.letters.all())
}

// failingIngest is a job store whose Ingest fails when a batch holds the
// job id: the first fails times, or always when forever.
type failingIngest struct {
	worker.JobStore
	id      string
	forever bool
	fails   atomic.Int32
	tries   atomic.Int32
}

func (f *failingIngest) Ingest(ctx context.Context, jobs []store.NewJob) ([]bool, error) {
	for _, j := range jobs {
		if j.Job.ID == f.id {
			f.tries.Add(1)
			if f.forever || f.fails.Add(-1) >= 0 {
				return nil, errors.New("planted: cannot record " + f.id)
			}
		}
	}
	return f.JobStore.Ingest(ctx, jobs)
}

// TestWorkerKafkaMessageThatFailsIngestion: a Kafka message whose job
// cannot be recorded twice is handed back and retried (not settled); once
// it goes in, every job finishes and the group's committed offsets reach
// the end of every partition (lag 0).
func TestWorkerKafkaMessageThatFailsIngestion(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 43, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
	dest, pub, sub := openBroker(t, kafkaURL(t, 2), 0)
	failing := &failingIngest{JobStore: tb.store.Queue(), id: "stuck"}
	failing.fails.Store(2)
	tb.start(t, func(c *worker.Config) { c.Subscriber, c.Store = sub, failing })
	ids := []string{"k-0", "stuck", "k-1", "k-2", "k-3", "k-4"}
	for _, id := range ids {
		require.NoError(t, pub.Publish(context.Background(), dest, transport.Message{Key: []byte(id), Value: jobJSON(id, "m", "")}))
	}
	recs := tb.waitTerminal(t, ids, time.Minute)
	for _, id := range ids {
		require.Equal(t, llmq.StatusSucceeded, recs[id].Status, id)
	}
	require.GreaterOrEqual(t, failing.tries.Load(), int32(3), "failed twice, then recorded")
	waitDrained(t, sub)
	require.EqualValues(t, len(ids), tb.sim.Sim.Stats().Total.Accepted)
}

// TestWorkerKafkaMessageThatNeverRecords: Kafka has no delivery limit, so
// the worker counts: a message whose job can never be recorded is handed
// back twice and dead-lettered (delivery_limit) at its third delivery,
// then acked; the jobs beside it succeed.
func TestWorkerKafkaMessageThatNeverRecords(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 45})
	dest, pub, sub := openBroker(t, kafkaURL(t, 1), 0)
	failing := &failingIngest{JobStore: tb.store.Queue(), id: "doomed", forever: true}
	tb.start(t, func(c *worker.Config) { c.Subscriber, c.Store = sub, failing })
	ids := []string{"k-0", "doomed", "k-1"}
	for _, id := range ids {
		require.NoError(t, pub.Publish(context.Background(), dest, transport.Message{Key: []byte(id), Value: jobJSON(id, "m", "")}))
	}
	l := tb.letters.wait(t, 1)[0]
	require.Equal(t, dlq.ReasonDeliveryLimit, l.Reason)
	require.Equal(t, "doomed", l.JobID)
	require.Contains(t, l.LastError, "not recorded in 3 deliveries: planted")
	recs := tb.waitTerminal(t, []string{"k-0", "k-1"}, time.Minute)
	require.Equal(t, llmq.StatusSucceeded, recs["k-0"].Status)
	require.Equal(t, llmq.StatusSucceeded, recs["k-1"].Status)
	waitDrained(t, sub)
	require.LessOrEqual(t, failing.tries.Load(), int32(6), "three deliveries, at most two inserts each")
}

// alerts records the dead-letter writer's alert events.
type alerts struct {
	mu     sync.Mutex
	events []dlq.Event
}

func (a *alerts) Notify(ev dlq.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, ev)
}

func (a *alerts) all() []dlq.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]dlq.Event(nil), a.events...)
}

// TestWorkerDeliveryLimitBecomesADeadLetter: on a RabbitMQ queue declared
// with a delivery limit of 1 (under the worker's own count of 3), a message whose job keeps failing to be
// recorded is handed back until the broker gives up on it; it then reaches
// the worker as a rejected message and becomes an llmq dead letter (row,
// DLQ message and alert), not a silent drop.
func TestWorkerDeliveryLimitBecomesADeadLetter(t *testing.T) {
	t.Parallel()
	tb := setup(t, upstreamsim.Config{Seed: 44})
	queue := rabbitmqtest.NewQueue(t)
	url := rabbitmqtest.BrokerURL(queue) + "&delivery_limit=1"
	pub, sub, err := open.Open(context.Background(), url, open.Options{Prefetch: 8, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	notes := &alerts{}
	writer, err := dlq.NewWriter(dlq.Config{Store: tb.store.DeadLetters(), Publisher: pub, Destination: queue, Alerter: notes,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	failing := &failingIngest{JobStore: tb.store.Queue(), id: "doomed", forever: true}
	tb.start(t, func(c *worker.Config) { c.Subscriber, c.Store, c.DeadLetters = sub, failing, writer })
	require.NoError(t, pub.Publish(context.Background(), queue,
		transport.Message{Value: jobJSON("fine", "m", "")}, transport.Message{Value: jobJSON("doomed", "m", "")}))

	require.Eventually(t, func() bool {
		letters, _, err := tb.store.DeadLetters().ListDeadLetters(context.Background(), store.DeadLetterListOptions{})
		return err == nil && len(letters) == 1 && letters[0].PublishedAt != nil
	}, time.Minute, 10*time.Millisecond)
	letters, _, err := tb.store.DeadLetters().ListDeadLetters(context.Background(), store.DeadLetterListOptions{})
	require.NoError(t, err)
	l := letters[0]
	require.Equal(t, "doomed", l.JobID)
	require.Equal(t, string(dlq.ReasonDeliveryLimit), l.Reason)
	require.Contains(t, l.LastError, "delivery_limit")
	require.Equal(t, queue+dlq.DLQSuffix, l.Destination)
	require.Equal(t, jobJSON("doomed", "m", ""), l.Message, "the original message")
	require.GreaterOrEqual(t, failing.tries.Load(), int32(2), "delivered up to the limit")
	require.Eventually(t, func() bool { return len(notes.all()) == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, dlq.ReasonDeliveryLimit, notes.all()[0].Reason)

	require.Equal(t, llmq.StatusSucceeded, tb.waitTerminal(t, []string{"fine"}, 30*time.Second)["fine"].Status)
	waitDrained(t, sub)
}
