package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/internal/tracing"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// Ingest: the broker is how jobs arrive; once a job is in Postgres, the
// message is acked and Postgres owns the job. A message is acked only once
// its job is durably recorded (queued), or dead-lettered (poison, or given
// up by the broker). A message whose job cannot be recorded is never
// settled silently: while the database is down the messages are held and
// the insert retried in place; a message that fails alone while others go
// in is handed back (nack), so the broker counts its deliveries.

// The ingest window's count of queued jobs (waitForWindow, windowCount):
// Postgres is read every windowRecount, counting up to the window and
// windowSlack more, and in between the count follows this worker's own
// records and claims, which cost nothing to know. Why, and the backlog case:
// docs/design/queue-of-record.md#the-ingest-window-count.
const (
	windowRecount = 2 * time.Second
	windowRefresh = 300 * time.Millisecond
)

// windowSlack is how far past the ingest window a read counts, so that the
// worker's claims can bring an exact count back under the window.
func windowSlack(window int) int64 { return int64(window) / 2 }

// windowCount is the count of queued jobs behind the ingest window: the
// last read, and what this worker recorded and claimed since. Whether a
// record or a claim made while a read is in flight is in the read cannot
// be told: the records are counted from when the read lands (one the read
// missed is not counted), the claims from when it was sent (one the read
// saw is counted twice). Either way the count is short, by what was
// recorded and claimed during one read, until the next: ingestion goes
// that far past the window (it is soft), and never waits for a read with
// room in Postgres.
type windowCount struct {
	mu sync.Mutex
	// read is the last read's count, capped set when it reached its
	// limit; recordedAt and claimedAt are the running totals recorded
	// and claimed as of the read.
	read                  int64
	capped                bool
	recordedAt, claimedAt int64
	recorded, claimed     int64
}

// value is the count: the last read, plus what was recorded since, less
// what was claimed since unless the read was capped (a floor then).
func (c *windowCount) value() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.read + c.recorded - c.recordedAt
	if !c.capped {
		n -= c.claimed - c.claimedAt
	}
	return n
}

// claims is the running total of the jobs claimed, taken when a read is
// sent.
func (c *windowCount) claims() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claimed
}

// set records a read of n (capped: it reached its limit) that landed now,
// sent when the running total of claims was claimed.
func (c *windowCount) set(n int64, capped bool, claimed int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.read, c.capped, c.recordedAt, c.claimedAt = n, capped, c.recorded, claimed
}

// isCapped reports whether the last read reached its limit.
func (c *windowCount) isCapped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.capped
}

// add counts jobs this worker recorded and claimed.
func (c *windowCount) add(recorded, claimed int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recorded += recorded
	c.claimed += claimed
}

// ingestItem is one message of a batch and, once decoded, its job.
type ingestItem struct {
	msg *transport.Message
	job store.NewJob
	// span is the message's ingest span (tracing.go); nil when off.
	span trace.Span
}

// forward copies the subscriber's messages into buf until they end or
// Stop begins.
func (in *ingester) forward(msgs <-chan *transport.Message, buf chan<- *transport.Message) {
	defer in.running.Done()
	defer close(buf)
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return
			}
			select {
			case buf <- m:
			case <-in.ctx.Done():
				in.nack(m)
				return
			}
		case <-in.ctx.Done():
			return
		}
	}
}

// ingestLoop records the messages of msgs in batches until Stop, pausing
// while Postgres holds more than the ingest window of queued jobs (the
// overflow stays in the broker).
func (in *ingester) ingestLoop(msgs <-chan *transport.Message) {
	defer in.running.Done()
	ctx := in.ctx
	for {
		if err := in.waitForWindow(ctx); err != nil {
			in.nackRest(msgs)
			return
		}
		var first *transport.Message
		select {
		case m, ok := <-msgs:
			if !ok {
				return
			}
			first = m
		case <-ctx.Done():
			in.nackRest(msgs)
			return
		}
		batch := []*transport.Message{first}
	gather:
		for len(batch) < in.cfg.Batch {
			select {
			case m, ok := <-msgs:
				if !ok {
					break gather
				}
				batch = append(batch, m)
			default:
				break gather
			}
		}
		in.ingest(batch)
	}
}

// windowLogEvery is the least time between two logs of a pause of
// ingestion (the ingest loops pause and resume together).
const windowLogEvery = time.Minute

// waitForWindow returns once Postgres holds fewer queued jobs than the
// ingest window or a tenant holds more than its share of it
// (ingest_tenants.go), or ctx's cause when ctx ends first. The count follows
// this worker's own ingests and claims, and is read again from Postgres
// every windowRecount (every windowRefresh while the last read reached its
// limit).
func (in *ingester) waitForWindow(ctx context.Context) error {
	if in.cfg.Window < 0 {
		return nil
	}
	paused := false
	for {
		in.readWindow(ctx)
		in.readTenants(ctx)
		n := in.window.value()
		if n < int64(in.cfg.Window) || in.tenants.overShare(in.cfg.Window, ingesters*in.cfg.Batch, in.cfg.Tenants()) {
			if paused {
				in.cfg.Log.Info("ingestion resumed", slog.Int64("queued", n))
			}
			return nil
		}
		if !paused {
			paused = true
			in.cfg.Metrics.ingestPauses.Inc()
			if now := in.cfg.Clock.Now().UnixNano(); now-in.windowLoggedAt.Swap(now) >= int64(windowLogEvery) {
				in.cfg.Log.Info("ingestion paused: Postgres holds the ingest window of queued jobs; the rest waits in the broker",
					slog.Int64("queued", n), slog.Int("window", in.cfg.Window))
			}
		}
		if err := sleep(ctx, in.cfg.Clock, windowRefresh); err != nil {
			return err
		}
	}
}

// readWindow reads the count of queued jobs from Postgres when it is due:
// windowRecount after the last read, or windowRefresh after a read that
// reached its limit (a backlog past the window: only whether it fell under
// the window matters then).
func (in *ingester) readWindow(ctx context.Context) {
	every, limit := windowRecount, int64(in.cfg.Window)+windowSlack(in.cfg.Window)
	if in.window.isCapped() {
		every, limit = windowRefresh, int64(in.cfg.Window)
	}
	now := in.cfg.Clock.Now().UnixNano()
	last := in.windowReadAt.Load()
	if now-last < int64(every) || !in.windowReadAt.CompareAndSwap(last, now) {
		return
	}
	claimed := in.window.claims()
	if n, err := in.cfg.Store.QueuedCount(ctx, limit); err == nil {
		in.window.set(n, n >= limit, claimed)
	}
}

// ingest decodes a batch of messages, dead-letters the ones that are not
// jobs and records the others.
func (in *ingester) ingest(batch []*transport.Message) {
	items := make([]ingestItem, 0, len(batch))
	in.readTenants(in.ctx)
	tenants := tenantAdmission{in: in}
	for _, m := range batch {
		if m.Rejected != "" {
			in.rejected(m)
			continue
		}
		j, err := llmq.Decode(m.Value, llmq.DecodeOptions{MaxMessageBytes: in.cfg.MaxMessageBytes})
		if err != nil {
			in.poison(m, err)
			continue
		}
		if refused := in.cfg.Catalog().CheckModels(j); len(refused) > 0 {
			in.letterOf(m, dlq.Letter{JobID: j.ID, Tenant: j.Tenant, Reason: dlq.ReasonModelNotAllowed, LastError: notAllowed(refused)})
			continue
		}
		if refused := in.cfg.Tenants().CheckProject(j); len(refused) > 0 {
			in.letterOf(m, dlq.Letter{JobID: j.ID, Tenant: j.Tenant, Reason: dlq.ReasonUnknownProject, LastError: notAllowed(refused)})
			continue
		}
		if !tenants.admit(j) {
			in.letterOf(m, in.tenantFull(j))
			continue
		}
		in.route(j, m)
		var span trace.Span
		j.TraceContext, span = tracing.StartIngest(m.Headers, j.ID, m.Source, m.ReceivedAt)
		items = append(items, ingestItem{msg: m, job: in.cfg.Sizer.NewJob(j), span: span})
	}
	if len(items) > 0 {
		in.record(items)
		in.traceIngested(items)
	}
}

// record inserts items and acks their messages. On an error it finds out
// whether the database is down (every insert fails: the messages are held
// and the insert retried in place until it works or the worker stops) or
// some messages fail alone (those are handed back to the broker, the
// others recorded).
func (in *ingester) record(items []ingestItem) {
	for attempt := 0; ; attempt++ {
		err := in.insert(items)
		if err == nil {
			in.ingestUp()
			return
		}
		if len(items) > 1 || errors.Is(err, store.ErrInvalidJob) {
			items = in.recordOneByOne(items)
			if len(items) == 0 {
				in.ingestUp()
				return
			}
		}
		// What is left failed alone: the database is down, or these
		// messages cannot go in while others can.
		if len(items) == 1 && in.databaseUp() {
			in.handBack(items, err)
			return
		}
		in.ingestDown(len(items), err)
		if sleep(in.ctx, in.cfg.Clock, retryDelay(attempt, ingestRetryMax)) != nil {
			in.nackAll(items)
			return
		}
	}
}

// ingestRetryMax caps the wait between two tries of recording messages
// while the database is down.
const ingestRetryMax = 5 * time.Second

// insert records items in one statement and acks their messages.
func (in *ingester) insert(items []ingestItem) error {
	jobs := make([]store.NewJob, len(items))
	for i, it := range items {
		jobs[i] = it.job
	}
	// Not cut by Stop: a batch in hand is finished (recorded and acked).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(in.ctx), ingestTimeout)
	defer cancel()
	created, err := in.cfg.Store.Ingest(ctx, jobs)
	if err != nil {
		return err
	}
	fresh := 0
	for i, it := range items {
		if created[i] {
			fresh++
			in.cfg.Recorded(it.job.Job.Model())
		}
		in.ack(it.msg)
	}
	in.window.add(int64(fresh), 0)
	in.countRecorded(items, created)
	in.cfg.Metrics.ingested.WithLabelValues("recorded").Add(float64(fresh))
	in.cfg.Metrics.ingested.WithLabelValues("duplicate").Add(float64(len(items) - fresh))
	if fresh > 0 {
		in.cfg.Wake()
	}
	return nil
}

// ingestTimeout bounds one insert.
const ingestTimeout = 30 * time.Second

// recordOneByOne records each item on its own and returns those that fail
// on a transient error; one Postgres refuses for good is poison.
func (in *ingester) recordOneByOne(items []ingestItem) []ingestItem {
	var failed []ingestItem
	for _, it := range items {
		err := in.insert([]ingestItem{it})
		switch {
		case err == nil:
		case errors.Is(err, store.ErrInvalidJob):
			in.poison(it.msg, err)
		default:
			failed = append(failed, it)
		}
	}
	return failed
}

// databaseUp pings the database.
func (in *ingester) databaseUp() bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(in.ctx), 5*time.Second)
	defer cancel()
	return in.cfg.Store.Ping(ctx) == nil
}

// handBack gives back messages that fail to be recorded on their own, after
// a pause so a message that keeps failing is no hot loop: the broker
// redelivers them. A message that failed maxDeliveries times is
// dead-lettered instead.
func (in *ingester) handBack(items []ingestItem, cause error) {
	var back []ingestItem
	for _, it := range items {
		if n := in.deliveries.fail(it.msg); n >= maxDeliveries {
			in.letterOf(it.msg, dlq.Letter{JobID: it.job.Job.ID, Tenant: it.job.Job.Tenant, Reason: dlq.ReasonDeliveryLimit,
				LastError: redact.Text(fmt.Sprintf("not recorded in %d deliveries: %v", n, cause), redact.ErrorMaxBytes)})
			continue
		}
		in.cfg.Log.Warn("message not recorded; handed back to the broker", slog.String("job_id", it.job.Job.ID),
			slog.String("tenant", it.job.Job.Tenant), slog.String("source", it.msg.Source), slog.Any("error", cause))
		back = append(back, it)
	}
	if len(back) == 0 {
		return
	}
	in.cfg.Metrics.handedBack.Add(float64(len(back)))
	_ = sleep(in.ctx, in.cfg.Clock, handBackDelay)
	in.nackAll(back)
}

// handBackDelay is how long a message that failed to be recorded alone is
// held before it is handed back.
const handBackDelay = time.Second

// nackRest hands back the messages left in msgs at Stop (the forwarder
// closes it).
func (in *ingester) nackRest(msgs <-chan *transport.Message) {
	for m := range msgs {
		in.nack(m)
	}
}

func (in *ingester) nackAll(items []ingestItem) {
	for _, it := range items {
		in.nack(it.msg)
	}
}

// ingestDown notes an ingest that failed on the database, logging once per
// outage.
func (in *ingester) ingestDown(held int, err error) {
	if in.ingestFailing.CompareAndSwap(false, true) {
		in.cfg.Log.Error("database unreachable: holding messages and retrying", slog.Int("held", held), slog.Any("error", err))
	}
}

// ingestUp notes an ingest that worked, logging the end of an outage.
func (in *ingester) ingestUp() {
	if in.ingestFailing.CompareAndSwap(true, false) {
		in.cfg.Log.Info("database reachable again: ingesting")
	}
}

// notAllowed is the dead letter's error of a job naming models the catalog
// does not allow, bounded (a job may name many).
func notAllowed(refused []llmq.FieldError) string {
	return redact.Text((&llmq.ValidationError{Errors: refused}).Error(), redact.ErrorMaxBytes)
}

// hint reads the id and tenant of a message that is not a valid job, to
// name its dead letter.
func hint(value []byte) (id, tenant string) {
	var h struct {
		ID     string `json:"id"`
		Tenant string `json:"tenant"`
	}
	_ = json.Unmarshal(value, &h) // best effort
	if !llmq.ValidID(h.ID) {
		h.ID = ""
	}
	return h.ID, h.Tenant
}

// poison dead-letters a message that is not a valid job, then acks it; a
// letter that cannot be recorded leaves the message to the broker.
func (in *ingester) poison(m *transport.Message, cause error) {
	id, tenant := hint(m.Value)
	in.letterOf(m, dlq.Letter{JobID: id, Tenant: tenant, Reason: dlq.ReasonPoison, LastError: cause.Error()})
}

// rejected dead-letters a message the broker gave up delivering (its
// delivery limit was reached: it kept failing to be recorded), then acks
// it.
func (in *ingester) rejected(m *transport.Message) {
	id, tenant := hint(m.Value)
	in.letterOf(m, dlq.Letter{JobID: id, Tenant: tenant, Reason: dlq.ReasonDeliveryLimit,
		LastError: fmt.Sprintf("the broker gave up delivering the message (%s, %d times)", m.Rejected, m.RejectedCount)})
}

// letterOf completes l with m and hands it to the dead-letter writer; the
// message is acked once the letter is safe. While the letter cannot be
// written (the database or the broker is away) the message is held and the
// write retried in place, never handed back to loop through the broker; at
// Stop it is handed back. A letter Postgres refuses even escaped is
// dropped, with one log line and llmq_ingest_dropped_total.
func (in *ingester) letterOf(m *transport.Message, l dlq.Letter) {
	l.Message, l.Key, l.Headers, l.Source, l.At = m.Value, m.Key, m.Headers, m.Source, in.cfg.Clock.Now()
	log := in.cfg.Log.With(slog.String("source", m.Source), slog.String("reason", string(l.Reason)))
	for attempt := 0; ; attempt++ {
		err := in.cfg.DeadLetters.DeadLetter(context.WithoutCancel(in.ctx), l)
		if err == nil {
			break
		}
		if errors.Is(err, store.ErrInvalidJob) {
			log.Error("Postgres refuses the message's dead letter; dropping the message", slog.Any("error", err))
			in.cfg.Metrics.dropped.Inc()
			in.ack(m)
			return
		}
		if attempt == 0 {
			log.Error("dead-letter a message; holding it and retrying", slog.Any("error", err))
		}
		if sleep(in.ctx, in.cfg.Clock, retryDelay(attempt, ingestRetryMax)) != nil {
			in.nack(m)
			return
		}
	}
	in.cfg.Metrics.deadLetters.WithLabelValues(string(l.Reason)).Inc()
	in.cfg.Metrics.jobs.WithLabelValues(string(llmq.StatusDeadLettered)).Inc()
	log.Warn("message dead-lettered", slog.String("job_id", l.JobID), slog.String("error", l.LastError))
	in.ack(m)
}

func (in *ingester) ack(m *transport.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch err := m.Ack(ctx); {
	case err == nil, errors.Is(err, transport.ErrClosed):
	case errors.Is(err, transport.ErrStaleDelivery):
		// A rebalance or reconnect took the message away; it comes back
		// and its job is found recorded.
		in.cfg.Log.Debug("ack of a stale delivery", slog.Any("error", err))
	default:
		in.cfg.Log.Error("ack", slog.Any("error", err))
	}
}

func (in *ingester) nack(m *transport.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Nack(ctx); err != nil && !errors.Is(err, transport.ErrClosed) && !errors.Is(err, transport.ErrStaleDelivery) {
		in.cfg.Log.Error("nack", slog.Any("error", err))
	}
}

// route fills the job's reply (where its result event goes) from its
// message when the job names none itself: the message's reply_to and
// correlation_id (RabbitMQ), else the tenant's reply, else the
// deployment's results topic. A job with a reply has the message's
// headers echoed on its result (docs/design/notifications.md).
func (in *ingester) route(j *llmq.Job, m *transport.Message) {
	if j.ReplyTo.Empty() {
		switch r, ok := tenantReply(in.cfg.TenantReplies, j.Tenant); {
		case m.ReplyTo != "":
			j.ReplyTo = &llmq.Reply{To: m.ReplyTo, CorrelationID: m.CorrelationID}
		case ok && !r.Empty():
			j.ReplyTo = &llmq.Reply{To: r.To, Webhook: r.Webhook}
		case in.cfg.ResultsTopic != "":
			j.ReplyTo = &llmq.Reply{To: in.cfg.ResultsTopic}
		default:
			return
		}
	}
	if j.ReplyTo.CorrelationID == "" {
		j.ReplyTo.CorrelationID = m.CorrelationID
	}
	if len(m.Headers) > 0 && j.ReplyTo.Headers == nil {
		j.ReplyTo.Headers = maps.Clone(m.Headers)
	}
}
