package open

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka"
	"github.com/llmq/llmq/transport/memory"
	"github.com/llmq/llmq/transport/rabbitmq"
)

// DestDefault is the topic or queue used when the URL names none.
const DestDefault = "llmq.jobs"

// Broker kinds.
const (
	KindKafka    = "kafka"
	KindRabbitMQ = "rabbitmq"
	KindMemory   = "memory"
)

// ErrBadURL is returned for a broker URL that cannot be used.
var ErrBadURL = errors.New("open: bad broker URL")

// Options tune what Open builds; zero values keep the adapters' defaults.
type Options struct {
	// Prefetch overrides the URL's prefetch parameter and the adapter's
	// default: the most messages outstanding at the subscriber.
	Prefetch int
	// Group overrides the URL's Kafka consumer group.
	Group string
	// Logger is passed to the adapters. Default slog.Default().
	Logger *slog.Logger
}

// Target is a parsed broker URL.
type Target struct {
	// Kind is KindKafka, KindRabbitMQ or KindMemory.
	Kind string
	// Dest is the topic or queue consumed; dead letters go to Dest+".dlq".
	Dest string
	// Brokers are the Kafka bootstrap addresses.
	Brokers []string
	// Group is the Kafka consumer group ("" = the adapter's default).
	Group string
	// AMQPURL is the AMQP URI without llmq's query parameters.
	AMQPURL string
	// QueueType and MaxPriority configure RabbitMQ queues ("" / 0 =
	// defaults).
	QueueType   string
	MaxPriority int
	// Memory is the in-memory broker's name.
	Memory string
	// Prefetch is the URL's prefetch parameter (0 = default).
	Prefetch int
}

// Parse parses a broker URL.
func Parse(brokerURL string) (Target, error) {
	u, err := url.Parse(brokerURL)
	if err != nil {
		// url.Error repeats the URL, password included: keep its reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Target{}, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	q := u.Query()
	t := Target{Dest: DestDefault}
	if p := q.Get("prefetch"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return Target{}, fmt.Errorf("%w: prefetch=%q must be a positive integer", ErrBadURL, p)
		}
		t.Prefetch = n
	}
	switch u.Scheme {
	case "kafka":
		t.Kind = KindKafka
		for _, h := range strings.Split(u.Host, ",") {
			if err := checkHostPort(h); err != nil {
				return Target{}, err
			}
			t.Brokers = append(t.Brokers, h)
		}
		if topic := strings.Trim(u.Path, "/"); topic != "" {
			if strings.Contains(topic, "/") {
				return Target{}, fmt.Errorf("%w: topic %q contains '/'", ErrBadURL, topic)
			}
			t.Dest = topic
		}
		t.Group = q.Get("group")
	case "amqp", "amqps":
		t.Kind = KindRabbitMQ
		if u.Port() != "" {
			if err := checkHostPort(u.Host); err != nil {
				return Target{}, err
			}
		}
		if queue := q.Get("queue"); queue != "" {
			t.Dest = queue
		}
		t.QueueType = q.Get("queue_type")
		if mp := q.Get("max_priority"); mp != "" {
			n, err := strconv.Atoi(mp)
			if err != nil {
				return Target{}, fmt.Errorf("%w: max_priority=%q: %w", ErrBadURL, mp, err)
			}
			t.MaxPriority = n
		}
		for _, k := range []string{"queue", "queue_type", "max_priority", "prefetch"} {
			q.Del(k)
		}
		amqpURL := *u
		amqpURL.RawQuery = q.Encode()
		t.AMQPURL = amqpURL.String()
	case "memory":
		t.Kind = KindMemory
		t.Memory = u.Host
		if queue := strings.Trim(u.Path, "/"); queue != "" {
			t.Dest = queue
		}
	default:
		return Target{}, fmt.Errorf("%w: scheme %q (want kafka, amqp, amqps or memory)", ErrBadURL, u.Scheme)
	}
	return t, nil
}

// checkHostPort checks a host:port pair of a broker URL.
func checkHostPort(h string) error {
	host, port, err := net.SplitHostPort(h)
	if err != nil || host == "" {
		return fmt.Errorf("%w: address %q is not host:port", ErrBadURL, h)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%w: address %q has no valid port", ErrBadURL, h)
	}
	return nil
}

// Open parses brokerURL and returns a publisher and a subscriber to the
// URL's topic or queue. Neither connects yet: connection errors surface on
// the first Publish, Consume or Depth. The caller closes both.
func Open(ctx context.Context, brokerURL string, opts Options) (transport.Publisher, transport.Subscriber, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("open: %w", err)
	}
	t, err := Parse(brokerURL)
	if err != nil {
		return nil, nil, err
	}
	prefetch := opts.Prefetch
	if prefetch == 0 {
		prefetch = t.Prefetch
	}
	group := opts.Group
	if group == "" {
		group = t.Group
	}
	switch t.Kind {
	case KindKafka:
		pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: t.Brokers, Logger: opts.Logger})
		if err != nil {
			return nil, nil, fmt.Errorf("open: %w", err)
		}
		sub, err := kafka.NewSubscriber(kafka.Config{
			Brokers: t.Brokers, Topic: t.Dest, Group: group, Prefetch: prefetch, Logger: opts.Logger,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("open: %w", errors.Join(err, pub.Close()))
		}
		return pub, sub, nil
	case KindRabbitMQ:
		cfg := rabbitmq.Config{
			URL: t.AMQPURL, Queue: t.Dest, QueueType: t.QueueType, MaxPriority: t.MaxPriority,
			Prefetch: prefetch, Logger: opts.Logger,
		}
		pub, err := rabbitmq.NewPublisher(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("open: %w", err)
		}
		sub, err := rabbitmq.NewSubscriber(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("open: %w", errors.Join(err, pub.Close()))
		}
		return pub, sub, nil
	default:
		b := memory.Shared(t.Memory)
		sub, err := b.NewSubscriber(t.Dest, memory.Config{Prefetch: prefetch})
		if err != nil {
			return nil, nil, fmt.Errorf("open: %w", err)
		}
		return b.NewPublisher(), sub, nil
	}
}
