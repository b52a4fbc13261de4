package memory

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/llmq/llmq/transport"
)

// PrefetchDefault is the default Config.Prefetch.
const PrefetchDefault = 64

// Config configures a Subscriber.
type Config struct {
	// Prefetch is the most messages a subscriber holds unacked.
	// Default PrefetchDefault when zero; must not be negative.
	Prefetch int
	// DeliveryLimit, when positive, is how many times a message may be
	// handed back (nacked, or unacked at Close) and delivered again: a
	// message delivered DeliveryLimit+1 times and handed back once more is
	// delivered from then on with Message.Rejected set to
	// transport.RejectedDeliveryLimit, as RabbitMQ's quorum queues do.
	// 0 = no limit.
	DeliveryLimit int
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Prefetch = cmp.Or(c.Prefetch, PrefetchDefault)
	return c
}

func (c Config) validate() error {
	if c.Prefetch < 1 {
		return fmt.Errorf("memory: Config.Prefetch must be >= 1, got %d", c.Prefetch)
	}
	if c.DeliveryLimit < 0 {
		return fmt.Errorf("memory: Config.DeliveryLimit must not be negative, got %d", c.DeliveryLimit)
	}
	return nil
}

var (
	sharedMu sync.Mutex
	shared   = map[string]*Broker{}
)

// Shared returns the process-wide broker with the given name, creating it on
// first use, so that an API and a worker in the same process (memory://name)
// reach the same queues.
func Shared(name string) *Broker {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	b, ok := shared[name]
	if !ok {
		b = New()
		shared[name] = b
	}
	return b
}

// Broker is an in-memory broker. The zero value is not usable; call New.
// All methods are safe for concurrent use.
type Broker struct {
	mu     sync.Mutex
	queues map[string]*queue
	seq    uint64
}

// New returns an empty broker.
func New() *Broker {
	return &Broker{queues: map[string]*queue{}}
}

type entry struct {
	msg         transport.Message
	seq         uint64
	redelivered bool
	// deliveries counts the deliveries; rejected is set once they passed
	// the subscriber's delivery limit.
	deliveries int
	rejected   bool
}

type entries []*entry

func (h entries) Len() int { return len(h) }
func (h entries) Less(i, j int) bool {
	if h[i].msg.Priority != h[j].msg.Priority {
		return h[i].msg.Priority > h[j].msg.Priority
	}
	return h[i].seq < h[j].seq
}
func (h entries) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *entries) Push(x any)   { *h = append(*h, x.(*entry)) }
func (h *entries) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

type queue struct {
	ready   entries
	unacked int
	// wake is closed and replaced whenever a message becomes ready.
	wake chan struct{}
}

// queueLocked returns the named queue, creating it. b.mu must be held.
func (b *Broker) queueLocked(name string) *queue {
	q, ok := b.queues[name]
	if !ok {
		q = &queue{wake: make(chan struct{})}
		b.queues[name] = q
	}
	return q
}

func (b *Broker) pushLocked(q *queue, e *entry) {
	heap.Push(&q.ready, e)
	close(q.wake)
	q.wake = make(chan struct{})
}

// Depth returns the ready plus unacked messages of the named queue.
func (b *Broker) Depth(name string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queueLocked(name)
	return int64(len(q.ready) + q.unacked)
}

// NewPublisher returns a publisher into b.
func (b *Broker) NewPublisher() *Publisher {
	return &Publisher{b: b}
}

// NewSubscriber returns a subscriber to the named queue of b.
func (b *Broker) NewSubscriber(queue string, cfg Config) (*Subscriber, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if queue == "" {
		return nil, fmt.Errorf("memory: empty queue name")
	}
	return &Subscriber{
		b:           b,
		queue:       queue,
		limit:       cfg.DeliveryLimit,
		slots:       make(chan struct{}, cfg.Prefetch),
		outstanding: map[uint64]*entry{},
		done:        make(chan struct{}),
	}, nil
}

// Publisher publishes into a Broker. Safe for concurrent use.
type Publisher struct {
	b      *Broker
	mu     sync.RWMutex
	closed bool
}

var (
	_ transport.Publisher = (*Publisher)(nil)
	_ transport.Replier   = (*Publisher)(nil)
)

// Publish appends msgs to the queue dest, creating it on first use.
func (p *Publisher) Publish(ctx context.Context, dest string, msgs ...transport.Message) error {
	return p.publish(ctx, "publish to", dest, true, msgs)
}

// Reply appends result events to the queue dest, as RabbitMQ's reply: it
// creates no queue, so a dest that no subscriber consumed and nothing was
// published to fails with transport.ErrUnroutable (the notifier tries
// again later).
func (p *Publisher) Reply(ctx context.Context, dest string, msgs ...transport.Message) error {
	return p.publish(ctx, "reply to", dest, false, msgs)
}

func (p *Publisher) publish(ctx context.Context, op, dest string, create bool, msgs []transport.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return fmt.Errorf("memory: %s %q: %w", op, dest, transport.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: %s %q: %w", op, dest, err)
	}
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	if _, ok := p.b.queues[dest]; !ok && !create {
		return fmt.Errorf("memory: %s %q: %w", op, dest, transport.ErrUnroutable)
	}
	q := p.b.queueLocked(dest)
	for _, m := range msgs {
		p.b.seq++
		stored := transport.Message{
			Key:           clone(m.Key),
			Value:         clone(m.Value),
			Headers:       cloneHeaders(m.Headers),
			Priority:      m.Priority,
			ReplyTo:       m.ReplyTo,
			CorrelationID: m.CorrelationID,
			ID:            m.ID,
		}
		p.b.pushLocked(q, &entry{msg: stored, seq: p.b.seq})
	}
	return nil
}

// Close makes further Publish calls fail with transport.ErrClosed.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}

// Subscriber consumes one queue of a Broker.
type Subscriber struct {
	b     *Broker
	queue string
	limit int // Config.DeliveryLimit
	// slots is the prefetch semaphore: one token per outstanding message.
	slots chan struct{}

	mu          sync.Mutex // guards the fields below; taken before b.mu
	outstanding map[uint64]*entry
	nextTag     uint64
	consuming   bool
	closed      bool
	done        chan struct{}
	wg          sync.WaitGroup
}

var _ transport.Subscriber = (*Subscriber)(nil)

// Consume starts delivering the queue's messages on the returned channel.
func (s *Subscriber) Consume(ctx context.Context) (<-chan *transport.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, fmt.Errorf("memory: consume %q: %w", s.queue, transport.ErrClosed)
	case s.consuming:
		return nil, fmt.Errorf("memory: consume %q: %w", s.queue, transport.ErrConsuming)
	}
	s.consuming = true
	// The queue exists from the first Consume on (replies reach it).
	s.b.mu.Lock()
	s.b.queueLocked(s.queue)
	s.b.mu.Unlock()
	out := make(chan *transport.Message)
	s.wg.Add(1)
	go s.run(ctx, out)
	return out, nil
}

func (s *Subscriber) run(ctx context.Context, out chan<- *transport.Message) {
	defer s.wg.Done()
	defer close(out)
	for {
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return
		case <-s.done:
			return
		}
		e, ok := s.next(ctx)
		if !ok {
			<-s.slots
			return
		}
		m, tag := s.deliver(e)
		select {
		case out <- m:
		case <-ctx.Done():
			_ = s.settleTag(tag, true)
			return
		case <-s.done:
			// Close requeues everything outstanding, e included.
			return
		}
	}
}

// next waits for a ready message and pops it; false when ctx or Close ends
// the wait.
func (s *Subscriber) next(ctx context.Context) (*entry, bool) {
	for {
		s.b.mu.Lock()
		q := s.b.queueLocked(s.queue)
		if len(q.ready) > 0 {
			e := heap.Pop(&q.ready).(*entry)
			q.unacked++
			s.b.mu.Unlock()
			return e, true
		}
		wake := q.wake
		s.b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, false
		case <-s.done:
			return nil, false
		}
	}
}

// deliver records e as outstanding and wraps it in a message.
func (s *Subscriber) deliver(e *entry) (*transport.Message, uint64) {
	s.mu.Lock()
	s.nextTag++
	tag := s.nextTag
	s.outstanding[tag] = e
	e.deliveries++
	s.mu.Unlock()
	m := e.msg
	m.Headers = cloneHeaders(m.Headers)
	m.Source = fmt.Sprintf("%s/%d", s.queue, tag)
	m.Redelivered = e.redelivered
	if e.rejected {
		m.Rejected, m.RejectedCount = transport.RejectedDeliveryLimit, 1
	}
	m.ReceivedAt = time.Now()
	return transport.NewMessage(m,
		func(context.Context) error { return s.settleTag(tag, false) },
		func(context.Context) error { return s.settleTag(tag, true) }), tag
}

func (s *Subscriber) settleTag(tag uint64, requeue bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("memory: settle %s/%d: %w", s.queue, tag, transport.ErrClosed)
	}
	e, ok := s.outstanding[tag]
	if !ok {
		return nil // already settled: settling twice is a no-op
	}
	delete(s.outstanding, tag)
	s.b.mu.Lock()
	q := s.b.queueLocked(s.queue)
	q.unacked--
	if requeue {
		s.requeueLocked(q, e)
	}
	s.b.mu.Unlock()
	<-s.slots
	return nil
}

// Depth returns the ready plus unacked messages of the queue (all
// subscribers' unacked messages, not only this one's).
func (s *Subscriber) Depth(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: depth of %q: %w", s.queue, err)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("memory: depth of %q: %w", s.queue, transport.ErrClosed)
	}
	return s.b.Depth(s.queue), nil
}

// Close stops consuming, closes the Consume channel and puts every unacked
// message back into the queue. Close is idempotent.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	s.wg.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	q := s.b.queueLocked(s.queue)
	for tag, e := range s.outstanding {
		delete(s.outstanding, tag)
		q.unacked--
		s.requeueLocked(q, e)
	}
	return nil
}

// requeueLocked puts a handed-back message back into q, rejected once it
// was delivered more than the delivery limit allows. s.mu and s.b.mu must
// be held.
func (s *Subscriber) requeueLocked(q *queue, e *entry) {
	e.redelivered = true
	if s.limit > 0 && e.deliveries > s.limit {
		e.rejected = true
	}
	s.b.pushLocked(q, e)
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

func cloneHeaders(h map[string]string) map[string]string {
	if h == nil {
		return nil
	}
	c := make(map[string]string, len(h))
	for k, v := range h {
		c[k] = v
	}
	return c
}
