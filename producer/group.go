package producer

import (
	"context"
	"fmt"
	"sync"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// Group commit of the outbox: concurrent PublishBatch calls share one
// transaction (store.InsertOutboxPublishing) and one publish whose confirms
// are awaited together. Rows are inserted marked published and committed
// once the broker confirmed, so a job takes no second write
// (docs/bench/enqueue.md). No timer, no goroutine: a caller queues its jobs
// and, while a flush slot is free, flushes everything queued; the others
// wait for that flush. docs/design/queue-of-record.md (the outbox).

// groupFlushes is the number of flushes in flight at once.
const groupFlushes = 4

// groupMaxJobs bounds the jobs of one flush.
const groupMaxJobs = 2000

// recordReq is one caller's jobs (validated, admitted) and their messages.
type recordReq struct {
	jobs []*llmq.Job
	// sized are jobs with their estimates, made by the caller (so the
	// tokenizer runs in each caller's goroutine, not in the shared flush).
	sized []store.NewJob
	msgs  []transport.Message
	done  chan recordResult // buffered 1
}

// recordResult is what became of a recordReq: recorded (nil with
// recordErr), and publishErr when the publish of its created jobs failed
// (they stay in the outbox for the sweeper).
type recordResult struct {
	recorded   []store.Recorded
	recordErr  error
	publishErr error
}

type grouper struct {
	mu    sync.Mutex
	queue []*recordReq
	slots chan struct{}
}

func newGrouper() *grouper { return &grouper{slots: make(chan struct{}, groupFlushes)} }

// record records and publishes jobs (msgs their messages) with the callers
// of the moment.
func (p *Producer) record(ctx context.Context, jobs []*llmq.Job, msgs []transport.Message) recordResult {
	g := p.group
	sized := make([]store.NewJob, len(jobs))
	for i, j := range jobs {
		sized[i] = p.cfg.Sizer.NewJob(j)
	}
	r := &recordReq{jobs: jobs, sized: sized, msgs: msgs, done: make(chan recordResult, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, r)
	g.mu.Unlock()
	for {
		select {
		case res := <-r.done:
			return res
		case g.slots <- struct{}{}:
		}
		g.mu.Lock()
		var batch []*recordReq
		n := 0
		for len(g.queue) > 0 && (n == 0 || n+len(g.queue[0].jobs) <= groupMaxJobs) {
			n += len(g.queue[0].jobs)
			batch = append(batch, g.queue[0])
			g.queue = g.queue[1:]
		}
		g.mu.Unlock()
		if len(batch) == 0 {
			// Another flush took r: its answer comes.
			<-g.slots
			return <-r.done
		}
		p.flush(ctx, batch)
		<-g.slots
	}
}

// flush records the jobs of batch in one transaction, publishes the
// created ones in one call before it commits, and answers every request.
// When the transaction fails, each request is recorded on its own, so a
// job Postgres refuses fails only its caller.
func (p *Producer) flush(ctx context.Context, batch []*recordReq) {
	// Not cut by the caller that happens to flush: the others wait on it.
	// The publish has PublishTimeout of its own (send); the transaction
	// as long again, so that a publish that timed out still leaves time to
	// commit the rows for the sweeper.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*p.cfg.PublishTimeout)
	defer cancel()
	jobs := batch[0].sized
	if len(batch) > 1 {
		jobs = nil
		for _, r := range batch {
			jobs = append(jobs, r.sized...)
		}
	}
	var publishErr error
	recorded, err := p.cfg.Store.InsertOutboxPublishing(ctx, jobs, func(recorded []store.Recorded) error {
		publishErr = p.send(ctx, created(batch, recorded))
		return publishErr
	})
	switch {
	case err != nil && len(batch) > 1:
		for _, r := range batch {
			p.flush(ctx, []*recordReq{r})
		}
		return
	case err != nil:
		batch[0].done <- recordResult{recordErr: err}
		return
	}
	i := 0
	for _, r := range batch {
		res := recordResult{recorded: recorded[i : i+len(r.jobs)], publishErr: publishErr}
		if !anyCreated(res.recorded) {
			res.publishErr = nil // nothing of this caller's was to publish
		}
		r.done <- res
		i += len(r.jobs)
	}
}

// created returns the messages of the created jobs of batch, whose
// InsertOutbox answers are recorded in order.
func created(batch []*recordReq, recorded []store.Recorded) []transport.Message {
	var fresh []transport.Message
	i := 0
	for _, r := range batch {
		for k := range r.jobs {
			if recorded[i+k].Created {
				fresh = append(fresh, r.msgs[k])
			}
		}
		i += len(r.jobs)
	}
	return fresh
}

func anyCreated(rs []store.Recorded) bool {
	for _, r := range rs {
		if r.Created {
			return true
		}
	}
	return false
}

// Drain waits until a measurement of the queue that PublishBatch started
// in the background (admission) ended, or ctx ends. Call it before
// exiting.
func (p *Producer) Drain(ctx context.Context) error {
	p.mu.Lock()
	measured := p.refreshed
	p.mu.Unlock()
	if measured == nil {
		return nil
	}
	select {
	case <-measured:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("producer: drain: %w", context.Cause(ctx))
	}
}
