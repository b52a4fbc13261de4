package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/memory"
	"github.com/llmq/llmq/transport/rabbitmq"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The job store is one a Producer can use.
var _ producer.Store = (*store.Outbox)(nil)

var quiet = slog.New(slog.DiscardHandler)

type testBundle struct {
	clock  *clockwork.FakeClock
	pool   *pgxpool.Pool
	store  *store.Store
	broker *memory.Broker
	sub    *memory.Subscriber
	dest   string
	// msgs is sub's delivery, once consumed (ingest).
	msgs <-chan *transport.Message
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	clk := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	// More connections than the flushes hold while they publish (pgxpool's
	// default is 4 here, as many as the flushes).
	cfg, err := pgxpool.ParseConfig(storetest.NewDB(t))
	require.NoError(t, err)
	cfg.MaxConns = 2 * producer.GroupFlushes
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := memory.New()
	sub, err := b.NewSubscriber("jobs", memory.Config{Prefetch: 1000})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return &testBundle{clock: clk, pool: pool, store: store.New(pool, store.WithClock(clk)), broker: b, sub: sub, dest: "jobs"}
}

func (b *testBundle) producer(t *testing.T, mod func(*producer.Config)) *producer.Producer {
	t.Helper()
	cfg := producer.Config{
		Publisher: b.broker.NewPublisher(), Store: b.store.Outbox(), Destination: b.dest, DepthProbe: b.sub,
		Clock: b.clock, DepthTTL: -1, Logger: quiet,
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := producer.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Drain(context.Background())) })
	return p
}

func newJob(id string) *llmq.Job {
	return &llmq.Job{ID: id, Tenant: "acme", Body: json.RawMessage(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)}
}

// receive takes the next message of the subscriber's queue within a second.
func receive(t *testing.T, msgs <-chan *transport.Message) *transport.Message {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no message within 5s")
		return nil
	}
}

func publishedAt(t *testing.T, pool *pgxpool.Pool, id string) *time.Time {
	t.Helper()
	var at *time.Time
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT published_at FROM jobs WHERE id = $1`, id).Scan(&at))
	return at
}

func TestPublishRecordsThenPublishes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, nil)
	ctx := context.Background()

	j := newJob("")
	j.Priority = llmq.PriorityHigh
	r, q, err := p.Publish(ctx, j)
	require.NoError(t, err)
	require.NotEmpty(t, r.ID)
	require.Equal(t, producer.Receipt{ID: r.ID, Tenant: "acme", Status: llmq.StatusQueued, Created: true, Published: true}, r)
	require.Equal(t, producer.StateOK, q.State)

	rec, err := b.store.Jobs().Get(ctx, "acme", r.ID)
	require.NoError(t, err)
	require.Equal(t, llmq.StatusQueued, rec.Status)
	require.NotNil(t, publishedAt(t, b.pool, r.ID))

	msgs, err := b.sub.Consume(ctx)
	require.NoError(t, err)
	m := receive(t, msgs)
	require.Equal(t, r.ID, string(m.Key), "keyed by job id by default")
	require.Equal(t, uint8(9), m.Priority)
	got, err := llmq.Decode(m.Value, llmq.DecodeOptions{})
	require.NoError(t, err)
	require.Equal(t, r.ID, got.ID)
	require.JSONEq(t, string(j.Body), string(got.Body))

	// Priorities map high 9 / normal 5 / low 1.
	for _, tc := range []struct {
		p    llmq.Priority
		want uint8
	}{{llmq.PriorityNormal, 5}, {llmq.PriorityLow, 1}} {
		j := newJob("")
		j.Priority = tc.p
		_, _, err := p.Publish(ctx, j)
		require.NoError(t, err)
		require.Equal(t, tc.want, receive(t, msgs).Priority)
	}
}

func TestPublishBatchDuplicatesAndTenants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, nil)
	ctx := context.Background()

	_, _, err := p.Publish(ctx, newJob("a"))
	require.NoError(t, err)
	other := newJob("b")
	other.Tenant = "globex"
	_, _, err = p.Publish(ctx, other)
	require.NoError(t, err)

	// Ids are scoped by tenant: globex's b is not acme's.
	rs, _, err := p.PublishBatch(ctx, []*llmq.Job{newJob("a"), newJob("b"), newJob("c")})
	require.NoError(t, err)
	require.Equal(t, []producer.Receipt{
		{ID: "a", Tenant: "acme", Status: llmq.StatusQueued},
		{ID: "b", Tenant: "acme", Status: llmq.StatusQueued, Created: true, Published: true},
		{ID: "c", Tenant: "acme", Status: llmq.StatusQueued, Created: true, Published: true},
	}, rs)
	require.Equal(t, int64(4), b.broker.Depth(b.dest), "a, b (globex), b and c: the duplicate was not republished")

	// A validation error names the job and its field; nothing is recorded.
	bad := newJob("d")
	bad.Body = json.RawMessage(`{"messages":[{"role":"user","content":"x"}]}`)
	_, _, err = p.PublishBatch(ctx, []*llmq.Job{newJob("e"), bad})
	var je *producer.JobError
	require.ErrorAs(t, err, &je)
	require.Equal(t, 1, je.Index)
	var ve *llmq.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, []string{"body.model"}, ve.Fields())
	_, err = b.store.Jobs().Get(ctx, "acme", "e")
	require.ErrorIs(t, err, store.ErrNotFound)

	// A job as llmq.Decode returned it is not validated again; one changed
	// since is.
	decoded, err := llmq.Decode([]byte(`{"id":"f","tenant":"acme","body":{"model":"m","messages":[{"role":"user"}]}}`),
		llmq.DecodeOptions{})
	require.NoError(t, err)
	decoded.Body = bad.Body
	_, _, err = p.PublishBatch(ctx, []*llmq.Job{decoded})
	require.ErrorAs(t, err, &je)
	require.Equal(t, 0, je.Index)
	require.ErrorAs(t, err, &ve)
	require.Equal(t, []string{"body.model"}, ve.Fields())

	jobs := make([]*llmq.Job, producer.MaxBatchDefault+1)
	for i := range jobs {
		jobs[i] = newJob("")
	}
	_, _, err = p.PublishBatch(ctx, jobs)
	require.ErrorIs(t, err, producer.ErrTooManyJobs)
}

// finish records n jobs that finished at the current time (they count in
// the completion rate).
func finish(t *testing.T, b *testBundle, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		j := newJob(fmt.Sprintf("done-%d-%d", b.clock.Now().UnixNano(), i))
		j.Body = json.RawMessage(`{"model":"finished","messages":[{"role":"user","content":"hi"}]}`)
		require.NoError(t, j.Normalize())
		require.NoError(t, j.Validate())
		_, err := b.store.Jobs().Insert(ctx, j)
		require.NoError(t, err)
		recs, err := b.store.Queue().Claim(ctx, store.ClaimRequest{Model: "finished", Owner: "w", Lease: time.Minute, Limit: 1})
		require.NoError(t, err)
		require.Len(t, recs, 1)
		_, err = b.store.Queue().StoreResult(ctx, recs[0].Key(), store.Result{Response: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
}

func TestBackpressureThresholds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, func(c *producer.Config) {
		c.SoftDepth, c.HardDepth, c.RateWindow = 5, 10, time.Minute
		// acme may hold the whole queue: the queue's limits bind.
		c.Tenants = llmq.Tenants{"acme": {Scope: llmq.Scope{SoftDepth: 100, HardDepth: 200}}}
	})
	ctx := context.Background()
	// 6 jobs finished in the last minute: 6/min, one every 10 s.
	finish(t, b, 6)

	for i := 0; i < 10; i++ {
		q, err := p.Queue(ctx)
		require.NoError(t, err)
		want := producer.StateOK
		if i >= 5 {
			want = producer.StateThrottled
		}
		require.Equal(t, want, q.State, "depth %d", i)
		require.Equal(t, int64(i), q.Depth)
		_, q, err = p.Publish(ctx, newJob(fmt.Sprintf("j%d", i)))
		require.NoError(t, err, "depth %d is below the hard limit", i)
		require.Equal(t, want, q.State)
	}

	q, err := p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, producer.QueueState{
		Depth: 10, Lag: 10, Queued: 10, CompletionRatePerMin: 6, EstimatedDrain: 100 * time.Second, DrainKnown: true,
		State: producer.StateRejecting, MeasuredAt: b.clock.Now(),
	}, q, "each job is queued in Postgres and a message in the broker: counted once")
	_, _, err = p.Publish(ctx, newJob("refused"))
	var bp *producer.ErrBackpressure
	require.ErrorAs(t, err, &bp)
	require.Equal(t, producer.ReasonQueueFull, bp.Reason)
	require.Equal(t, 50*time.Second, bp.RetryAfter, "(10 - soft 5) jobs at 6/min")
	_, err = b.store.Jobs().Get(ctx, "acme", "refused")
	require.ErrorIs(t, err, store.ErrNotFound, "a refused job is not recorded")

	// The workers drain the queue: the state switches back off.
	b.work(t, 10)
	q, err = p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, producer.StateOK, q.State)
	require.Equal(t, int64(0), q.Depth)
	_, _, err = p.Publish(ctx, newJob("after-drain"))
	require.NoError(t, err)
}

func TestBackpressureUnknownRateAndCache(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, func(c *producer.Config) {
		c.SoftDepth, c.HardDepth, c.DepthTTL = 1, 2, time.Second
	})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		_, _, err := p.Publish(ctx, newJob(fmt.Sprintf("j%d", i)))
		require.NoError(t, err)
		b.clock.Advance(time.Second)
	}
	q, err := p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, producer.StateRejecting, q.State)
	require.False(t, q.DrainKnown, "no job finished: the drain time is unknown")
	_, _, err = p.Publish(ctx, newJob("x"))
	var bp *producer.ErrBackpressure
	require.ErrorAs(t, err, &bp)
	require.Equal(t, producer.RetryAfterDefault, bp.RetryAfter)

	// Within the TTL the cached state is used even though the queue drained.
	b.work(t, 2)
	q, err = p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), q.Depth)
	b.clock.Advance(time.Second)
	q, err = p.Queue(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), q.Depth)
	require.Equal(t, producer.StateOK, q.State)
}

func TestDeadlineAdmission(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, func(c *producer.Config) { c.RateWindow = time.Minute })
	ctx := context.Background()
	finish(t, b, 6) // 6/min
	for i := 0; i < 10; i++ {
		_, _, err := p.Publish(ctx, newJob(fmt.Sprintf("j%d", i)))
		require.NoError(t, err)
	}
	// Depth 10 at 6/min: 100 s to drain.
	soon := b.clock.Now().Add(30 * time.Second)
	j := newJob("urgent")
	j.Deadline = &soon
	rs, _, err := p.PublishBatch(ctx, []*llmq.Job{newJob("fine"), j})
	require.Nil(t, rs)
	var bp *producer.ErrBackpressure
	require.ErrorAs(t, err, &bp)
	require.Equal(t, producer.ReasonDeadline, bp.Reason)
	require.Equal(t, 1, bp.Index)
	require.Equal(t, "urgent", bp.JobID)
	require.Equal(t, 70*time.Second, bp.RetryAfter)
	require.Equal(t, 100*time.Second, bp.Queue.EstimatedDrain)

	later := b.clock.Now().Add(101 * time.Second)
	j.Deadline = &later
	_, _, err = p.Publish(ctx, j)
	require.NoError(t, err)
}

func TestOutboxSweepAfterCrash(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, nil)
	ctx := context.Background()

	// The producer "crashes" between the insert and the publish: the row
	// exists, the broker never got the message.
	j := newJob("crashed")
	require.NoError(t, j.Normalize())
	require.NoError(t, j.Validate())
	created, err := b.store.Outbox().InsertOutbox(ctx, []store.NewJob{{Job: j}})
	require.NoError(t, err)
	require.Equal(t, []store.Recorded{{Created: true, Status: llmq.StatusQueued}}, created)
	require.Nil(t, publishedAt(t, b.pool, "crashed"))
	// A job published normally is never swept.
	_, _, err = p.Publish(ctx, newJob("fine"))
	require.NoError(t, err)
	msgs, err := b.sub.Consume(ctx)
	require.NoError(t, err)
	fine := receive(t, msgs)
	require.Equal(t, "fine", mustDecode(t, fine).ID)
	require.NoError(t, fine.Ack(ctx))

	n, err := p.Sweep(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.Equal(t, 0, n, "within the grace period the publish may still be under way")

	b.clock.Advance(time.Minute + time.Microsecond)
	n, err = p.Sweep(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	m := receive(t, msgs)
	require.Equal(t, "crashed", mustDecode(t, m).ID)
	require.Equal(t, "crashed", string(m.Key))
	require.NotNil(t, publishedAt(t, b.pool, "crashed"))
	require.NoError(t, m.Ack(ctx))

	n, err = p.Sweep(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.Equal(t, 0, n, "exactly once more")
	require.Equal(t, int64(0), b.broker.Depth(b.dest), "no other message was published")
}

func mustDecode(t *testing.T, m *transport.Message) *llmq.Job {
	t.Helper()
	j, err := llmq.Decode(m.Value, llmq.DecodeOptions{})
	require.NoError(t, err)
	return j
}

func TestSweepPagesAndSkipsFinished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, nil)
	ctx := context.Background()
	var jobs []store.NewJob
	for i := 0; i < 7; i++ {
		j := newJob(fmt.Sprintf("c%d", i))
		require.NoError(t, j.Normalize())
		require.NoError(t, j.Validate())
		jobs = append(jobs, store.NewJob{Job: j})
	}
	_, err := b.store.Outbox().InsertOutbox(ctx, jobs)
	require.NoError(t, err)
	_, err = b.store.Jobs().Cancel(ctx, "acme", "c6")
	require.NoError(t, err)
	b.clock.Advance(time.Hour)
	n, err := p.Sweep(ctx, time.Minute, 2)
	require.NoError(t, err)
	require.Equal(t, 6, n, "the cancelled job is not republished")
	require.Equal(t, int64(6), b.broker.Depth(b.dest))
}

func TestSweeperStartStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, nil)
	ctx := context.Background()
	j := newJob("orphan")
	require.NoError(t, j.Normalize())
	require.NoError(t, j.Validate())
	_, err := b.store.Outbox().InsertOutbox(ctx, []store.NewJob{{Job: j}})
	require.NoError(t, err)
	b.clock.Advance(time.Hour)

	s, err := producer.NewSweeper(producer.SweeperConfig{Producer: p, Interval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	msgs, err := b.sub.Consume(ctx)
	require.NoError(t, err)
	require.Equal(t, "orphan", mustDecode(t, receive(t, msgs)).ID)
	require.NoError(t, s.Stop(ctx))
	require.NoError(t, s.Stop(ctx), "a second Stop is harmless")
}

// TestBrokerDownOutbox runs against RabbitMQ: with the broker unreachable
// the probe refuses jobs (nothing recorded); a publish failing after the
// insert leaves the job queued and the sweeper publishes it, with its
// priority, once a broker answers.
func TestBrokerDownOutbox(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("RabbitMQ")
	}
	b := setup(t)
	ctx := context.Background()
	dead := rabbitmq.Config{URL: "amqp://guest:guest@127.0.0.1:1/", Queue: "llmq-test-dead", DialTimeout: time.Second,
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 20 * time.Millisecond, Logger: quiet}
	deadPub, err := rabbitmq.NewPublisher(dead)
	require.NoError(t, err)
	t.Cleanup(func() { _ = deadPub.Close() })
	deadSub, err := rabbitmq.NewSubscriber(dead)
	require.NoError(t, err)
	t.Cleanup(func() { _ = deadSub.Close() })

	probed := b.producer(t, func(c *producer.Config) { c.Publisher, c.DepthProbe = deadPub, deadSub })
	_, _, err = probed.Publish(ctx, newJob("refused"))
	require.ErrorIs(t, err, producer.ErrBrokerUnavailable)
	_, err = b.store.Jobs().Get(ctx, "acme", "refused")
	require.ErrorIs(t, err, store.ErrNotFound)

	// The probe passed (none configured) but the publish fails.
	unprobed := b.producer(t, func(c *producer.Config) {
		c.Publisher, c.DepthProbe, c.PublishTimeout = deadPub, nil, 2*time.Second
	})
	j := newJob("kept")
	j.Priority = llmq.PriorityLow
	r, _, err := unprobed.Publish(ctx, j)
	require.ErrorIs(t, err, producer.ErrUnpublished)
	require.Equal(t, producer.Receipt{ID: "kept", Tenant: "acme", Status: llmq.StatusQueued, Created: true}, r)
	rec, err := b.store.Jobs().Get(ctx, "acme", "kept")
	require.NoError(t, err)
	require.Equal(t, llmq.StatusQueued, rec.Status)

	// The broker is back.
	queue := rabbitmqtest.NewQueue(t)
	live := rabbitmq.Config{URL: rabbitmqtest.URL(), Queue: queue, QueueType: rabbitmq.QueueClassic, Logger: quiet}
	pub, err := rabbitmq.NewPublisher(live)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	sub, err := rabbitmq.NewSubscriber(live)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	p := b.producer(t, func(c *producer.Config) { c.Publisher, c.DepthProbe, c.Destination = pub, sub, queue })
	b.clock.Advance(producer.SweepGraceDefault + time.Second)
	n, err := p.Sweep(ctx, producer.SweepGraceDefault, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	msgs, err := sub.Consume(ctx)
	require.NoError(t, err)
	m := receive(t, msgs)
	require.Equal(t, "kept", mustDecode(t, m).ID)
	require.Equal(t, uint8(1), m.Priority)
	require.NoError(t, m.Ack(ctx))
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := producer.New(producer.Config{SoftDepth: 10, HardDepth: 5})
	require.Error(t, err)
	for _, field := range []string{"Publisher", "Store", "Destination", "HardDepth"} {
		require.ErrorContains(t, err, "Config."+field)
	}
	_, err = producer.NewSweeper(producer.SweeperConfig{})
	require.ErrorContains(t, err, "SweeperConfig.Producer")
	require.True(t, errors.Is(fmt.Errorf("x: %w", producer.ErrUnpublished), producer.ErrUnpublished))
}

// TestPredictedDeadlineAdmission: with Config.Predict the deadline is
// checked against the job's own prediction, not the queue's drain: an
// unknown prediction admits (the drain would refuse), a known one past
// the deadline refuses with it.
func TestPredictedDeadlineAdmission(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var pred store.Prediction
	p := b.producer(t, func(c *producer.Config) {
		c.RateWindow = time.Minute
		c.Predict = func(context.Context, *llmq.Job) (store.Prediction, error) { return pred, nil }
	})
	ctx := context.Background()
	finish(t, b, 6) // 6/min
	for i := range 10 {
		_, _, err := p.Publish(ctx, newJob(fmt.Sprintf("j%d", i)))
		require.NoError(t, err)
	}
	// Depth 10 at 6/min is 100 s of drain: ignored.
	soon := b.clock.Now().Add(30 * time.Second)
	j := newJob("urgent")
	j.Deadline = &soon
	_, _, err := p.Publish(ctx, j)
	require.NoError(t, err, "no rate known: admitted")

	pred = store.Prediction{Known: true, Wait: 45 * time.Second, Ahead: 3}
	j = newJob("urgent-2")
	j.Deadline = &soon
	_, _, err = p.Publish(ctx, j)
	var bp *producer.ErrBackpressure
	require.ErrorAs(t, err, &bp)
	require.Equal(t, producer.ReasonDeadline, bp.Reason)
	require.Equal(t, 15*time.Second, bp.RetryAfter)
	require.Equal(t, &pred, bp.Prediction)

	pred.Wait = 29 * time.Second
	_, _, err = p.Publish(ctx, j)
	require.NoError(t, err)
}
