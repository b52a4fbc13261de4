package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/llmq/llmq/transport"
)

// Subscriber consumes one topic as a member of a consumer group.
type Subscriber struct {
	cfg       Config
	log       *slog.Logger
	client    *kafkago.Client
	transport *kafkago.Transport
	// slots is the prefetch semaphore: one token per outstanding message.
	slots chan struct{}

	mu        sync.Mutex // guards the fields below and every tracker
	consuming bool
	closed    bool
	cancel    context.CancelFunc
	// closing is closed by Close: the group is left only then, so that
	// messages acked after Consume's ctx ended are still committed.
	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	// fetchers counts the running partition fetch loops and the
	// redelivery loop: the goroutines that send on the Consume channel.
	fetchers sync.WaitGroup

	// nacked are the deliveries nacked and not yet handed out again, in
	// nack order; wake tells the redelivery loop there are some. Guarded
	// by mu. stopped is set once nothing is handed out any more (the
	// Consume ctx ended): a Nack then leaves its message to the next
	// generation.
	nacked  []*delivery
	wake    chan struct{}
	stopped bool
}

var _ transport.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a subscriber; it joins the group on Consume.
func NewSubscriber(cfg Config) (*Subscriber, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tr := cfg.Security.transport()
	return &Subscriber{
		cfg:       cfg,
		log:       cfg.Logger.With(slog.String("topic", cfg.Topic), slog.String("group", cfg.Group)),
		client:    &kafkago.Client{Addr: kafkago.TCP(cfg.Brokers...), Timeout: cfg.Timeout, Transport: tr},
		transport: tr,
		slots:     make(chan struct{}, cfg.Prefetch),
		closing:   make(chan struct{}),
		wake:      make(chan struct{}, 1),
	}, nil
}

// Consume joins the consumer group and delivers the messages of the
// partitions assigned to this member.
func (s *Subscriber) Consume(ctx context.Context) (<-chan *transport.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, fmt.Errorf("kafka: consume %s: %w", s.cfg.Topic, transport.ErrClosed)
	case s.consuming:
		return nil, fmt.Errorf("kafka: consume %s: %w", s.cfg.Topic, transport.ErrConsuming)
	}
	cg, err := kafkago.NewConsumerGroup(kafkago.ConsumerGroupConfig{
		ID:                s.cfg.Group,
		Brokers:           s.cfg.Brokers,
		Topics:            []string{s.cfg.Topic},
		HeartbeatInterval: s.cfg.HeartbeatInterval,
		SessionTimeout:    s.cfg.SessionTimeout,
		RebalanceTimeout:  s.cfg.RebalanceTimeout,
		JoinGroupBackoff:  s.cfg.HeartbeatInterval,
		StartOffset:       kafkago.FirstOffset,
		Timeout:           s.cfg.Timeout,
		Dialer:            s.cfg.Security.dialer(s.cfg.Timeout),
		ErrorLogger:       s.errorLogger(),
	})
	if err != nil {
		return nil, fmt.Errorf("kafka: consume %s: %w", s.cfg.Topic, err)
	}
	s.consuming = true
	ctx, s.cancel = context.WithCancel(ctx)
	out := make(chan *transport.Message)
	s.wg.Add(1)
	go s.run(ctx, cg, out)
	return out, nil
}

func (s *Subscriber) errorLogger() kafkago.Logger {
	return kafkago.LoggerFunc(func(msg string, args ...any) {
		s.log.Warn("kafka client", slog.String("error", fmt.Sprintf(msg, args...)))
	})
}

// run follows the group's generations until ctx ends, then stops fetching
// and closes out. The member stays in the group, still committing acks of
// the messages handed out, until Close; then the last generation's final
// commit runs and the member leaves.
func (s *Subscriber) run(ctx context.Context, cg *kafkago.ConsumerGroup, out chan<- *transport.Message) {
	defer s.wg.Done()
	defer func() {
		<-s.closing
		if err := cg.Close(); err != nil {
			s.log.Warn("kafka: leave group", slog.Any("error", err))
		}
	}()
	defer close(out)
	defer func() {
		s.fetchers.Wait()
		s.mu.Lock()
		s.stopped, s.nacked = true, nil
		s.mu.Unlock()
	}()
	s.fetchers.Add(1)
	go s.redeliverLoop(ctx, out)
	for {
		gen, err := cg.Next(ctx)
		switch {
		case ctx.Err() != nil || errors.Is(err, kafkago.ErrGroupClosed):
			return
		case err != nil:
			s.log.Warn("kafka: join group", slog.Any("error", err))
			continue
		}
		s.startGeneration(ctx, gen, out)
	}
}

// startGeneration starts one fetch loop per assigned partition and the
// generation's commit loop. kafka-go ends the generation when any function
// it started returns, so a fetch loop stopped by ctx waits for the
// generation's end before returning.
func (s *Subscriber) startGeneration(ctx context.Context, gen *kafkago.Generation, out chan<- *transport.Message) {
	trackers := map[int]*tracker{}
	for _, a := range gen.Assignments[s.cfg.Topic] {
		t := newTracker(s.cfg.Topic, a.ID)
		trackers[a.ID] = t
		offset := a.Offset
		s.fetchers.Add(1)
		gen.Start(func(genCtx context.Context) {
			fctx, cancel := context.WithCancel(ctx)
			stop := context.AfterFunc(genCtx, cancel)
			s.fetch(fctx, t, offset, out)
			stop()
			cancel()
			s.fetchers.Done()
			<-genCtx.Done()
		})
	}
	s.log.Debug("kafka: generation started", slog.Int("generation", int(gen.ID)), slog.Int("partitions", len(trackers)))
	gen.Start(func(genCtx context.Context) { s.commitLoop(genCtx, gen, trackers) })
}

// fetch reads one partition from offset and hands its messages out, one
// prefetch slot each.
func (s *Subscriber) fetch(ctx context.Context, t *tracker, offset int64, out chan<- *transport.Message) {
	r := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers:         s.cfg.Brokers,
		Topic:           t.topic,
		Partition:       t.partition,
		MinBytes:        1,
		MaxBytes:        8 << 20,
		MaxWait:         s.cfg.MaxWait,
		QueueCapacity:   min(s.cfg.Prefetch, 100),
		ReadLagInterval: -1,
		Dialer:          s.cfg.Security.dialer(s.cfg.Timeout),
		ErrorLogger:     s.errorLogger(),
	})
	defer r.Close()
	if err := r.SetOffset(offset); err != nil {
		s.log.Warn("kafka: set offset", slog.Int("partition", t.partition), slog.Int64("offset", offset), slog.Any("error", err))
		return
	}
	for {
		km, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return
			}
			s.log.Warn("kafka: fetch", slog.Int("partition", t.partition), slog.Any("error", err))
			select {
			case <-time.After(s.cfg.MaxWait):
			case <-ctx.Done():
				return
			}
			continue
		}
		if !s.handOut(ctx, t, km, out) {
			return
		}
	}
}

// handOut takes a prefetch slot, records km in t and hands it out; false
// when ctx ended first. A message not handed out stays unacked below the
// commit point and comes back in the next generation.
func (s *Subscriber) handOut(ctx context.Context, t *tracker, km kafkago.Message, out chan<- *transport.Message) bool {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	s.mu.Lock()
	d := t.add(km)
	m := s.messageLocked(d, false)
	s.mu.Unlock()
	return s.send(ctx, d, m, out)
}

// send hands m (a hand-out of d) to the consumer; when ctx ends first the
// hand-out is taken back and its slot freed.
func (s *Subscriber) send(ctx context.Context, d *delivery, m *transport.Message, out chan<- *transport.Message) bool {
	select {
	case out <- m:
		return true
	case <-ctx.Done():
		s.mu.Lock()
		d.outstanding = false
		s.mu.Unlock()
		<-s.slots
		return false
	}
}

// redeliverLoop hands nacked deliveries out again, each with a prefetch
// slot, until ctx ends. They are sent from memory, not fetched again, so
// a nacked message comes back at once and among later offsets of its
// partition (partition order is not kept for it), while the commit point
// stays at its offset until it is acked.
func (s *Subscriber) redeliverLoop(ctx context.Context, out chan<- *transport.Message) {
	defer s.fetchers.Done()
	for {
		s.mu.Lock()
		var d *delivery
		if len(s.nacked) > 0 {
			d = s.nacked[0]
			s.nacked[0] = nil
			s.nacked = s.nacked[1:]
		}
		s.mu.Unlock()
		if d == nil {
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		s.mu.Lock()
		if d.t.revoked {
			// The generation ended: its next owner fetches it again.
			s.mu.Unlock()
			<-s.slots
			continue
		}
		m := s.messageLocked(d, true)
		s.mu.Unlock()
		if !s.send(ctx, d, m, out) {
			return
		}
	}
}

// messageLocked starts a hand-out of d and returns its message. s.mu must
// be held.
func (s *Subscriber) messageLocked(d *delivery, redelivered bool) *transport.Message {
	km := d.msg
	d.handouts++
	d.outstanding = true
	n := d.handouts
	m := transport.Message{
		Key:         km.Key,
		Value:       km.Value,
		Source:      fmt.Sprintf("%s/%d/%d", km.Topic, km.Partition, km.Offset),
		Redelivered: redelivered,
		ReceivedAt:  time.Now(),
	}
	if len(km.Headers) > 0 {
		m.Headers = make(map[string]string, len(km.Headers))
		for _, h := range km.Headers {
			m.Headers[h.Key] = string(h.Value)
		}
	}
	return transport.NewMessage(m,
		func(context.Context) error { return s.settle(d, n, true) },
		func(context.Context) error { return s.settle(d, n, false) })
}

// settle acks or nacks hand-out n of d and frees its prefetch slot; a
// settle of a hand-out already settled is a no-op. An ack may move the
// commit point; a nack queues d for redelivery, and its offset is not
// committed until a later hand-out is acked.
func (s *Subscriber) settle(d *delivery, n int, ack bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.handouts != n || !d.outstanding {
		return nil
	}
	d.outstanding = false
	<-s.slots
	switch {
	case s.closed:
		return fmt.Errorf("kafka: settle %s/%d/%d: %w", d.t.topic, d.t.partition, d.offset, transport.ErrClosed)
	case d.t.revoked:
		return fmt.Errorf("kafka: settle %s/%d/%d: %w", d.t.topic, d.t.partition, d.offset, transport.ErrStaleDelivery)
	case ack:
		d.t.ack(d)
	case !s.stopped:
		s.nacked = append(s.nacked, d)
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// commitLoop commits the acked prefixes every CommitInterval and once more
// when the generation ends, then revokes the generation's trackers.
func (s *Subscriber) commitLoop(ctx context.Context, gen *kafkago.Generation, trackers map[int]*tracker) {
	tick := time.NewTicker(s.cfg.CommitInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			s.commit(gen, trackers, false)
		case <-ctx.Done():
			s.commit(gen, trackers, true)
			return
		}
	}
}

// commit sends the moved commit points of trackers; final also revokes them
// (under the same lock, so every ack is either in this commit or stale).
func (s *Subscriber) commit(gen *kafkago.Generation, trackers map[int]*tracker, final bool) {
	s.mu.Lock()
	offsets := map[int]int64{}
	for p, t := range trackers {
		if at, ok := t.toCommit(); ok {
			offsets[p] = at
		}
		if final {
			t.revoked = true
		}
	}
	s.mu.Unlock()
	if len(offsets) == 0 {
		return
	}
	if err := gen.CommitOffsets(map[string]map[int]int64{s.cfg.Topic: offsets}); err != nil {
		s.log.Warn("kafka: commit", slog.Int("generation", int(gen.ID)), slog.Any("error", err))
		return
	}
	s.mu.Lock()
	for p, at := range offsets {
		trackers[p].committed = at
	}
	s.mu.Unlock()
}

// Depth returns the group's lag on the topic: for every partition the high
// watermark minus the committed offset (the log start when none).
func (s *Subscriber) Depth(ctx context.Context) (int64, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("kafka: depth of %s: %w", s.cfg.Topic, transport.ErrClosed)
	}
	return Lag(ctx, s.client, s.cfg.Topic, s.cfg.Group)
}

// Lag returns the consumer group's lag on topic through client: high
// watermark minus committed offset (the log start offset when the group
// committed nothing), summed over the partitions.
func Lag(ctx context.Context, client *kafkago.Client, topic, group string) (int64, error) {
	meta, err := client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, fmt.Errorf("kafka: lag of %s: metadata: %w", topic, err)
	}
	var parts []int
	for _, t := range meta.Topics {
		if t.Name != topic {
			continue
		}
		if errors.Is(t.Error, kafkago.UnknownTopicOrPartition) {
			return 0, nil // nothing was ever published
		}
		if t.Error != nil {
			return 0, fmt.Errorf("kafka: lag of %s: metadata: %w", topic, t.Error)
		}
		for _, p := range t.Partitions {
			parts = append(parts, p.ID)
		}
	}
	if len(parts) == 0 {
		return 0, nil
	}
	var reqs []kafkago.OffsetRequest
	for _, p := range parts {
		reqs = append(reqs, kafkago.FirstOffsetOf(p), kafkago.LastOffsetOf(p))
	}
	lo, err := client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: reqs}})
	if err != nil {
		return 0, fmt.Errorf("kafka: lag of %s: list offsets: %w", topic, err)
	}
	of, err := client.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		return 0, fmt.Errorf("kafka: lag of %s: offset fetch: %w", topic, err)
	}
	committed := map[int]int64{}
	switch {
	case errors.Is(of.Error, kafkago.GroupIdNotFound):
		// The group never committed: the lag is the whole log.
	case of.Error != nil:
		return 0, fmt.Errorf("kafka: lag of %s: offset fetch: %w", topic, of.Error)
	}
	for _, p := range of.Topics[topic] {
		if errors.Is(p.Error, kafkago.GroupIdNotFound) {
			continue
		}
		if p.Error != nil {
			return 0, fmt.Errorf("kafka: lag of %s/%d: offset fetch: %w", topic, p.Partition, p.Error)
		}
		committed[p.Partition] = p.CommittedOffset
	}
	var lag int64
	for _, p := range lo.Topics[topic] {
		if p.Error != nil {
			return 0, fmt.Errorf("kafka: lag of %s/%d: list offsets: %w", topic, p.Partition, p.Error)
		}
		from := p.FirstOffset
		if c, ok := committed[p.Partition]; ok && c >= 0 {
			from = max(c, p.FirstOffset)
		}
		lag += max(p.LastOffset-from, 0)
	}
	return lag, nil
}

// Close stops consuming: the generation's final commit sends the acked
// prefixes, the member leaves the group and the Consume channel closes.
// Messages not acked come back to the next member. Close is idempotent.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.closeOnce.Do(func() { close(s.closing) })
	s.wg.Wait()
	s.mu.Lock()
	alreadyClosed := s.closed
	s.closed = true
	s.mu.Unlock()
	if !alreadyClosed {
		s.transport.CloseIdleConnections()
	}
	return nil
}
