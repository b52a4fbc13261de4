package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/llmq/llmq/transport"
)

// Publisher writes messages to Kafka topics. Safe for concurrent use;
// concurrent Publish calls share produce batches.
type Publisher struct {
	cfg       PublisherConfig
	log       *slog.Logger
	w         *kafkago.Writer
	client    *kafkago.Client
	transport *kafkago.Transport

	mu     sync.RWMutex // guards closed; Publish holds it shared
	closed bool

	topicsMu sync.Mutex
	topics   map[string]bool // topics known to exist
}

var (
	_ transport.Publisher   = (*Publisher)(nil)
	_ transport.SizeLimiter = (*Publisher)(nil)
	_ transport.Replier     = (*Publisher)(nil)
)

// NewPublisher returns a publisher.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tr := cfg.Security.transport()
	p := &Publisher{
		cfg:       cfg,
		log:       cfg.Logger,
		client:    &kafkago.Client{Addr: kafkago.TCP(cfg.Brokers...), Timeout: cfg.Timeout, Transport: tr},
		transport: tr,
		topics:    map[string]bool{},
	}
	p.w = &kafkago.Writer{
		Addr:         kafkago.TCP(cfg.Brokers...),
		Balancer:     kafkago.Murmur2Balancer{},
		RequiredAcks: kafkago.RequireAll,
		BatchTimeout: cfg.BatchTimeout,
		BatchSize:    cfg.BatchSize,
		BatchBytes:   int64(cfg.MaxMessageBytes - RecordBatchOverhead),
		Transport:    tr,
		ErrorLogger: kafkago.LoggerFunc(func(msg string, args ...any) {
			p.log.Warn("kafka writer", slog.String("error", fmt.Sprintf(msg, args...)))
		}),
	}
	return p, nil
}

// Publish writes msgs to topic dest and returns once every replica has them.
// A missing topic is created first unless DisableTopicCreation is set.
func (p *Publisher) Publish(ctx context.Context, dest string, msgs ...transport.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return fmt.Errorf("kafka: publish to %s: %w", dest, transport.ErrClosed)
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := p.ensureTopic(ctx, dest); err != nil {
		return err
	}
	kms := make([]kafkago.Message, len(msgs))
	for i, m := range msgs {
		km := kafkago.Message{Topic: dest, Key: m.Key, Value: m.Value}
		if len(m.Headers) > 0 {
			km.Headers = make([]kafkago.Header, 0, len(m.Headers))
			for k, v := range m.Headers {
				km.Headers = append(km.Headers, kafkago.Header{Key: k, Value: []byte(v)})
			}
		}
		kms[i] = km
	}
	if err := p.w.WriteMessages(ctx, kms...); err != nil {
		if rejected(err) {
			return fmt.Errorf("kafka: publish %d messages to %s: %w: %w", len(kms), dest, transport.ErrMessageRejected, err)
		}
		return fmt.Errorf("kafka: publish %d messages to %s: %w", len(kms), dest, err)
	}
	return nil
}

// Reply writes result events to the results topic dest, as Publish does
// (the topic is created when missing unless DisableTopicCreation is set:
// the deployment, a tenant or a job named it); Kafka has no reply
// properties, so msgs carry their correlation in their headers.
func (p *Publisher) Reply(ctx context.Context, dest string, msgs ...transport.Message) error {
	return p.Publish(ctx, dest, msgs...)
}

// rejected tells a refusal of the messages themselves (too large for the
// batch limit or the broker, or malformed) from a failure worth retrying.
// kafka-go reports a message over the batch limit before sending anything
// (MessageTooLargeError, which unwraps to MessageSizeTooLarge) and the
// broker's answers per message in WriteErrors.
func rejected(err error) bool {
	var werrs kafkago.WriteErrors
	if errors.As(err, &werrs) {
		for _, e := range werrs {
			if e != nil && rejected(e) {
				return true
			}
		}
		return false
	}
	return errors.Is(err, kafkago.MessageSizeTooLarge) || errors.Is(err, kafkago.RecordListTooLarge) ||
		errors.Is(err, kafkago.InvalidRecord)
}

// MaxValueBytes is the largest Value a message with m's key and headers may
// have to fit in a record batch under MaxMessageBytes. It counts the
// record's size as the writer does before it batches (as a v1 message, a
// few bytes more than the v2 record the broker measures): a message of
// that size is sent, and one byte more is refused.
func (p *Publisher) MaxValueBytes(m transport.Message) int {
	// offset/length/CRC (4), magic (1), attributes (1), key and value
	// lengths (4 each), timestamp (8); then the headers as varint-sized
	// strings.
	size := 4 + 1 + 1 + 4 + len(m.Key) + 4 + 8 + varintLen(len(m.Headers))
	for k, v := range m.Headers {
		size += varintLen(len(k)) + len(k) + varintLen(len(v)) + len(v)
	}
	return max(p.cfg.MaxMessageBytes-RecordBatchOverhead-size, 0)
}

// varintLen is the length of n as a zig-zag varint.
func varintLen(n int) int {
	u := uint64(n) << 1
	l := 1
	for ; u >= 0x80; u >>= 7 {
		l++
	}
	return l
}

// ensureTopic creates topic unless it is known to exist.
func (p *Publisher) ensureTopic(ctx context.Context, topic string) error {
	if p.cfg.DisableTopicCreation {
		return nil
	}
	p.topicsMu.Lock()
	defer p.topicsMu.Unlock()
	if p.topics[topic] {
		return nil
	}
	err := CreateTopic(ctx, p.client, topic, p.cfg.TopicPartitions)
	if err != nil {
		return fmt.Errorf("kafka: publish to %s: %w", topic, err)
	}
	p.topics[topic] = true
	return nil
}

// CreateTopic creates topic with the given partition count (zero: the
// broker's default) and the broker's default replication; an existing topic
// is not an error.
func CreateTopic(ctx context.Context, client *kafkago.Client, topic string, partitions int) error {
	if partitions == 0 {
		partitions = -1
	}
	resp, err := client.CreateTopics(ctx, &kafkago.CreateTopicsRequest{
		Topics: []kafkago.TopicConfig{{Topic: topic, NumPartitions: partitions, ReplicationFactor: -1}},
	})
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	if err := resp.Errors[topic]; err != nil && !errors.Is(err, kafkago.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// Close flushes pending writes and makes further Publish calls fail with
// transport.ErrClosed. Close is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	err := p.w.Close()
	p.transport.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("kafka: close publisher: %w", err)
	}
	return nil
}
