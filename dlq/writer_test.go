package dlq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/memory"
)

// testPublisher wraps a publisher: it fails while fail is set and reports
// every confirmed publish on published.
type testPublisher struct {
	transport.Publisher
	mu        sync.Mutex
	fail      error
	published chan published
}

type published struct {
	dest string
	msg  transport.Message
}

func (p *testPublisher) setFail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = err
}

func (p *testPublisher) Publish(ctx context.Context, dest string, msgs ...transport.Message) error {
	p.mu.Lock()
	fail := p.fail
	p.mu.Unlock()
	if fail != nil {
		return fail
	}
	if err := p.Publisher.Publish(ctx, dest, msgs...); err != nil {
		return err
	}
	for _, m := range msgs {
		p.published <- published{dest, m}
	}
	return nil
}

// next returns the next confirmed publish, failing after 5 s.
func (p *testPublisher) next(t *testing.T) published {
	t.Helper()
	select {
	case m := <-p.published:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no publish within 5s")
		return published{}
	}
}

// none checks that nothing more was published.
func (p *testPublisher) none(t *testing.T) {
	t.Helper()
	select {
	case m := <-p.published:
		t.Fatalf("unexpected publish to %s: %s", m.dest, m.msg.Value)
	default:
	}
}

// notifier records alert events.
type notifier struct {
	mu     sync.Mutex
	events []Event
}

func (n *notifier) Notify(ev Event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, ev)
}

func (n *notifier) got() []Event {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Event(nil), n.events...)
}

type dlqBundle struct {
	ctx    context.Context
	clock  *clockwork.FakeClock
	store  *store.Store
	pub    *testPublisher
	alerts *notifier
	reg    *prometheus.Registry
	writer *Writer
	svc    *Service
	// leases are the claims of claimedJob, by job id.
	leases map[string]store.Lease
}

const testDest = "jobs"

func setupDLQ(t *testing.T) *dlqBundle {
	t.Helper()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	st, err := store.Open(ctx, storetest.NewDB(t), store.WithClock(clock))
	require.NoError(t, err)
	t.Cleanup(st.Close)
	b := &dlqBundle{
		ctx: ctx, clock: clock, store: st, alerts: &notifier{}, reg: prometheus.NewRegistry(), leases: map[string]store.Lease{},
		pub: &testPublisher{Publisher: memory.New().NewPublisher(), published: make(chan published, 100)},
	}
	cfg := Config{Store: st.DeadLetters(), Publisher: b.pub, Destination: testDest, Alerter: b.alerts, Clock: clock, Registerer: b.reg}
	b.writer, err = NewWriter(cfg)
	require.NoError(t, err)
	b.svc, err = NewService(cfg)
	require.NoError(t, err)
	return b
}

// claimedJob stores job id of tenant acme as running, as the worker has it
// when it gives up, and returns its wire message.
func (b *dlqBundle) claimedJob(t *testing.T, id string) []byte {
	t.Helper()
	msg := []byte(fmt.Sprintf(`{"id":%q,"tenant":"acme","priority":"high","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`, id))
	j, err := llmq.Decode(msg, llmq.DecodeOptions{})
	require.NoError(t, err)
	_, err = b.store.Jobs().Insert(b.ctx, j)
	require.NoError(t, err)
	b.claim(t, id)
	return msg
}

// claim claims the queued job id (the only queued job) for w1.
func (b *dlqBundle) claim(t *testing.T, id string) {
	t.Helper()
	recs, err := b.store.Queue().Claim(b.ctx, store.ClaimRequest{Model: "m", Owner: "w1", Lease: time.Minute, Limit: 1})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, id, recs[0].ID)
	b.leases[id] = recs[0].Lease()
}

// letter is the worker's letter of job id: from its holder, with the lease
// of its last claim.
func (b *dlqBundle) letter(id string, msg []byte) Letter {
	return Letter{
		JobID: id, Tenant: "acme", Reason: ReasonRetriesExhausted, LastError: "rate_limited: 429 Too Many Requests",
		Attempts: 8, Model: "m", Message: msg, Key: []byte("acme"), Headers: map[string]string{"trace": "t1"},
		Source: "jobs/3/42", At: b.clock.Now(), LeaseToken: b.leases[id].Token,
	}
}

func (b *dlqBundle) jobStatus(t *testing.T, id string) *store.JobRecord {
	t.Helper()
	rec, err := b.store.Jobs().Get(b.ctx, "acme", id)
	require.NoError(t, err)
	return rec
}

func TestWriterIdempotentUnderRepeatedCalls(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	msg := b.claimedJob(t, "j1")
	l := b.letter("j1", msg)

	// The worker hands the same letter over again after redeliveries, some
	// of them concurrently.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = b.writer.DeadLetter(b.ctx, l) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, b.writer.DeadLetter(b.ctx, l))

	recs, next, err := b.svc.List(b.ctx, store.DeadLetterListOptions{})
	require.NoError(t, err)
	require.Equal(t, "", next)
	require.Len(t, recs, 1)
	r := recs[0]
	require.Equal(t, "j1", r.JobID)
	require.Equal(t, string(ReasonRetriesExhausted), r.Reason)
	require.Equal(t, testDest+DLQSuffix, r.Destination)
	require.NotNil(t, r.PublishedAt)
	require.Equal(t, msg, r.Message)

	// One letter: concurrent first calls may both publish before either
	// confirms (at-least-once), so duplicates must carry the same letter id.
	p := b.pub.next(t)
	require.Equal(t, "jobs.dlq", p.dest)
	require.Equal(t, msg, p.msg.Value)
	require.Equal(t, []byte("acme"), p.msg.Key)
	require.Equal(t, map[string]string{
		"trace": "t1", HeaderReason: "retries_exhausted", HeaderAttempts: "8",
		HeaderLastError: "rate_limited: 429 Too Many Requests", HeaderSource: "jobs/3/42",
		HeaderDeadLetterID: strconv.FormatInt(r.ID, 10),
	}, p.msg.Headers)
	for {
		select {
		case dup := <-b.pub.published:
			require.Equal(t, strconv.FormatInt(r.ID, 10), dup.msg.Headers[HeaderDeadLetterID])
			continue
		default:
		}
		break
	}

	job := b.jobStatus(t, "j1")
	require.Equal(t, llmq.StatusDeadLettered, job.Status)
	require.Equal(t, "retries_exhausted", job.ErrorCode)
	require.Len(t, b.alerts.got(), 1)
	require.Equal(t, "j1", b.alerts.got()[0].JobID)
	m := gather(t, b.reg)
	require.Equal(t, 1.0, m[`llmq_dlq_letters_recorded_total{reason="retries_exhausted"}`])
	require.Equal(t, 1.0, m["llmq_dlq_letters_published_total"])
}

func TestWriterSequentialRepeatPublishesOnce(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	msg := b.claimedJob(t, "j1")
	for range 3 {
		require.NoError(t, b.writer.DeadLetter(b.ctx, b.letter("j1", msg)))
	}
	b.pub.next(t)
	b.pub.none(t)
	require.Len(t, b.alerts.got(), 1)
}

func TestWriterPoisonMessage(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	l := Letter{Reason: ReasonPoison, LastError: "invalid JSON", Message: []byte("{not json"), Source: "jobs/1/7"}
	require.NoError(t, b.writer.DeadLetter(b.ctx, l))
	require.NoError(t, b.writer.DeadLetter(b.ctx, l))
	p := b.pub.next(t)
	b.pub.none(t)
	require.Equal(t, []byte("{not json"), p.msg.Value)
	require.Equal(t, "poison", p.msg.Headers[HeaderReason])
	recs, _, err := b.svc.List(b.ctx, store.DeadLetterListOptions{DeadLetterFilter: store.DeadLetterFilter{Tenant: llmq.DefaultTenant}})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "", recs[0].JobID)

	// A poison message whose id names no stored job is fine too.
	l2 := Letter{JobID: "ghost", Reason: ReasonPoison, Message: []byte(`{"id":"ghost"}`)}
	require.NoError(t, b.writer.DeadLetter(b.ctx, l2))
	require.Equal(t, []byte(`{"id":"ghost"}`), b.pub.next(t).msg.Value)
}

// TestWriterPoisonLeavesTheJobOfItsID: a poison message that claims the id
// of a stored job is its own letter (keyed by its bytes) and leaves that
// job alone; two poison messages claiming one id are two letters.
func TestWriterPoisonLeavesTheJobOfItsID(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	j, err := llmq.Decode([]byte(`{"id":"j1","tenant":"acme","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`), llmq.DecodeOptions{})
	require.NoError(t, err)
	_, err = b.store.Jobs().Insert(b.ctx, j)
	require.NoError(t, err)
	for _, msg := range []string{`{"id":"j1","tenant":"acme"}`, `{"id":"j1","tenant":"acme","body":1}`} {
		require.NoError(t, b.writer.DeadLetter(b.ctx, Letter{JobID: "j1", Tenant: "acme", Reason: ReasonPoison, Message: []byte(msg)}))
		require.Equal(t, msg, string(b.pub.next(t).msg.Value))
	}
	recs, _, err := b.svc.List(b.ctx, store.DeadLetterListOptions{DeadLetterFilter: store.DeadLetterFilter{Tenant: "acme"}})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, llmq.StatusQueued, b.jobStatus(t, "j1").Status)
}

func TestWriterPublishFailureThenRepair(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	broken := errors.New("broker down")

	// A job: the failed publish is returned; its holder's letter is
	// recorded and the job dead-lettered with it.
	msg := b.claimedJob(t, "j1")
	b.pub.setFail(broken)
	err := b.writer.DeadLetter(b.ctx, b.letter("j1", msg))
	require.ErrorIs(t, err, broken)
	require.Equal(t, llmq.StatusDeadLettered, b.jobStatus(t, "j1").Status)
	// A poison message, and a letter without a lease (the broker gave up
	// a message) of a job that its holder then ran to success.
	poison := Letter{Reason: ReasonPoison, Message: []byte("garbage")}
	require.ErrorIs(t, b.writer.DeadLetter(b.ctx, poison), broken)
	msg2 := b.claimedJob(t, "j2")
	unheld := b.letter("j2", msg2)
	unheld.LeaseToken = 0
	require.ErrorIs(t, b.writer.DeadLetter(b.ctx, unheld), broken)
	require.Equal(t, llmq.StatusRunning, b.jobStatus(t, "j2").Status, "a letter without the lease leaves a held job alone")
	_, err = b.store.Queue().StoreResult(b.ctx, b.leases["j2"].Key, store.Result{})
	require.NoError(t, err)
	require.Empty(t, b.alerts.got())
	require.Equal(t, 3.0, gather(t, b.reg)["llmq_dlq_publish_failures_total"])

	// The broker is back. Too early for the sweep: nothing happens.
	b.pub.setFail(nil)
	st, err := b.writer.Repair(b.ctx)
	require.NoError(t, err)
	require.Equal(t, RepairStats{}, st)
	b.pub.none(t)

	// j1's holder hands the letter over again: published once.
	require.NoError(t, b.writer.DeadLetter(b.ctx, b.letter("j1", msg)))
	require.Equal(t, msg, b.pub.next(t).msg.Value)
	require.Equal(t, llmq.StatusDeadLettered, b.jobStatus(t, "j1").Status)

	// The sweep publishes the poison letter and drops j2's.
	b.clock.Advance(RepairAfterDefault + time.Second)
	st, err = b.writer.Repair(b.ctx)
	require.NoError(t, err)
	require.Equal(t, RepairStats{Published: 1, Dropped: 1}, st)
	p := b.pub.next(t)
	require.Equal(t, []byte("garbage"), p.msg.Value)
	b.pub.none(t)
	st, err = b.writer.Repair(b.ctx)
	require.NoError(t, err)
	require.Equal(t, RepairStats{}, st)

	recs, _, err := b.svc.List(b.ctx, store.DeadLetterListOptions{})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	for _, r := range recs {
		require.NotNil(t, r.PublishedAt)
	}
	require.Len(t, b.alerts.got(), 2)
	require.Equal(t, llmq.StatusSucceeded, b.jobStatus(t, "j2").Status)
}

func TestWriterStartRunsRepair(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	b.pub.setFail(errors.New("broker down"))
	require.Error(t, b.writer.DeadLetter(b.ctx, Letter{Reason: ReasonPoison, Message: []byte("x")}))
	b.pub.setFail(nil)

	require.NoError(t, b.writer.Start(b.ctx))
	require.ErrorIs(t, b.writer.Start(b.ctx), ErrAlreadyStarted)
	waitTimers(t, b.clock, 1)              // the next repair pass, RepairInterval from now
	b.clock.Advance(RepairIntervalDefault) // = RepairAfterDefault: not yet older
	waitTimers(t, b.clock, 1)              // the next repair pass, RepairInterval from now
	b.pub.none(t)
	b.clock.Advance(RepairIntervalDefault)
	require.Equal(t, []byte("x"), b.pub.next(t).msg.Value)
	waitTimers(t, b.clock, 1) // the next repair pass, RepairInterval from now
	require.NoError(t, b.writer.Stop(b.ctx))
	require.NoError(t, b.writer.Stop(b.ctx))
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	st := store.New(nil)
	pub := memory.New().NewPublisher()
	for name, tc := range map[string]struct {
		cfg   Config
		field string
	}{
		"no store":       {Config{Publisher: pub, Destination: "d"}, "Store"},
		"no publisher":   {Config{Store: st.DeadLetters(), Destination: "d"}, "Publisher"},
		"no destination": {Config{Store: st.DeadLetters(), Publisher: pub}, "Destination"},
		"negative after": {Config{Store: st.DeadLetters(), Publisher: pub, Destination: "d", RepairAfter: -1}, "RepairAfter"},
	} {
		_, err := NewWriter(tc.cfg)
		require.ErrorIs(t, err, ErrInvalidConfig, name)
		require.ErrorContains(t, err, tc.field, name)
	}
	_, err := NewService(Config{Store: st.DeadLetters()})
	require.NoError(t, err)
}
