package config

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// BrokerKind names a broker adapter.
type BrokerKind string

const (
	// BrokerKafka: kafka://host:port[,host:port]/topic[?group=name].
	BrokerKafka BrokerKind = "kafka"
	// BrokerAMQP: amqp[s]://user:pass@host:port/vhost?queue=name.
	BrokerAMQP BrokerKind = "amqp"
	// BrokerEmbedded: an in-process broker (single process, for demos and
	// tests).
	BrokerEmbedded BrokerKind = "embedded"
)

// Broker defaults.
const (
	// DestinationDefault is the Kafka topic or RabbitMQ queue when the URL
	// names none.
	DestinationDefault = "llmq.jobs"
	// KafkaGroupDefault is the Kafka consumer group when ?group= is absent.
	KafkaGroupDefault = "llmq-workers"
)

// Broker is LLMQ_BROKER parsed.
type Broker struct {
	Kind BrokerKind
	// Addrs are the Kafka bootstrap brokers (host:port); the AMQP host:port.
	Addrs []string
	// Topic (Kafka) or Queue (AMQP) holds the jobs; Destination returns
	// whichever applies.
	Topic string
	Queue string
	// Group is the Kafka consumer group.
	Group string
	// URL is what the adapter dials: for AMQP the URL without the queue
	// parameter (as amqp091.Dial takes it), for Kafka the URL as given.
	URL string
	// Options holds the URL's other query parameters for the adapter.
	Options url.Values
	// Raw is LLMQ_BROKER exactly as given (for internal/transport/open).
	Raw string
}

// Destination is the topic or queue of jobs.
func (b Broker) Destination() string {
	if b.Kind == BrokerKafka {
		return b.Topic
	}
	return b.Queue
}

// String is the URL without credentials, for logs.
func (b Broker) String() string {
	if b.Kind == BrokerEmbedded {
		return string(BrokerEmbedded)
	}
	u, err := url.Parse(b.URL)
	if err != nil || b.Kind == BrokerKafka {
		return b.URL
	}
	return u.Redacted()
}

// ParseBroker parses the forms of LLMQ_BROKER.
func ParseBroker(s string) (Broker, error) {
	s = strings.TrimSpace(s)
	b, err := parseBroker(s)
	b.Raw = s
	return b, err
}

func parseBroker(s string) (Broker, error) {
	if s == string(BrokerEmbedded) {
		return Broker{Kind: BrokerEmbedded, Topic: DestinationDefault, Queue: DestinationDefault, URL: s}, nil
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return Broker{}, fmt.Errorf("%q is not kafka://..., amqp://... or embedded", s)
	}
	switch strings.ToLower(scheme) {
	case "kafka":
		return parseKafka(s, rest)
	case "amqp", "amqps":
		return parseAMQP(s)
	}
	return Broker{}, fmt.Errorf("unknown scheme %q (want kafka, amqp, amqps or embedded)", scheme)
}

// parseKafka reads host:port[,host:port]/topic[?group=g]; url.Parse cannot,
// as it refuses a comma in the port.
func parseKafka(raw, rest string) (Broker, error) {
	rest, query, _ := strings.Cut(rest, "?")
	hosts, path, _ := strings.Cut(rest, "/")
	opts, err := url.ParseQuery(query)
	if err != nil {
		return Broker{}, fmt.Errorf("query: %w", err)
	}
	b := Broker{Kind: BrokerKafka, URL: raw, Topic: path, Group: opts.Get("group")}
	opts.Del("group")
	b.Options = opts
	if b.Topic == "" {
		b.Topic = DestinationDefault
	}
	if strings.Contains(b.Topic, "/") {
		return Broker{}, fmt.Errorf("topic %q contains '/'", b.Topic)
	}
	if b.Group == "" {
		b.Group = KafkaGroupDefault
	}
	for _, h := range strings.Split(hosts, ",") {
		if err := checkHostPort(h); err != nil {
			return Broker{}, err
		}
		b.Addrs = append(b.Addrs, h)
	}
	return b, nil
}

func parseAMQP(raw string) (Broker, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Broker{}, err
	}
	host := u.Host
	if u.Port() == "" {
		port := "5672"
		if u.Scheme == "amqps" {
			port = "5671"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	if err := checkHostPort(host); err != nil {
		return Broker{}, err
	}
	q := u.Query()
	b := Broker{Kind: BrokerAMQP, Addrs: []string{host}, Queue: q.Get("queue")}
	if b.Queue == "" {
		b.Queue = DestinationDefault
	}
	q.Del("queue")
	b.Options = q
	u.RawQuery = q.Encode()
	b.URL = u.String()
	return b, nil
}

func checkHostPort(h string) error {
	host, port, err := net.SplitHostPort(h)
	if err != nil || host == "" {
		return fmt.Errorf("address %q is not host:port", h)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("address %q has no valid port", h)
	}
	return nil
}

// checkURL checks that s is an absolute URL with one of the schemes.
func checkURL(s string, schemes ...string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL", redactURL(s))
	}
	for _, sc := range schemes {
		if strings.EqualFold(u.Scheme, sc) {
			if u.Host == "" {
				return fmt.Errorf("%q has no host", u.Redacted())
			}
			return nil
		}
	}
	return fmt.Errorf("%q: scheme must be %s", u.Redacted(), strings.Join(schemes, " or "))
}

func redactURL(s string) string {
	if at := strings.LastIndex(s, "@"); at >= 0 {
		return "…" + s[at:]
	}
	return s
}
