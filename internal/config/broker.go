package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/transport/open"
)

// BrokerKind names a broker adapter: one of the transport's kinds
// (open.KindKafka, ...), or BrokerEmbedded.
type BrokerKind string

const (
	// BrokerKafka: kafka://host:port[,host:port]/topic[?group=name].
	BrokerKafka BrokerKind = open.KindKafka
	// BrokerAMQP: amqp[s]://user:pass@host:port/vhost?queue=name.
	BrokerAMQP BrokerKind = open.KindRabbitMQ
	// BrokerMemory: memory://name/queue, an in-process broker shared by
	// the parts of one process (tests).
	BrokerMemory BrokerKind = open.KindMemory
	// BrokerEmbedded: an in-process Kafka cluster (kfake) started by the
	// command itself, for demos and trials.
	BrokerEmbedded BrokerKind = "embedded"
)

// DestinationDefault is the Kafka topic or RabbitMQ queue when the URL names
// none.
const DestinationDefault = open.DestDefault

// Broker is LLMQ_BROKER parsed. The URL grammar is the transport's own
// (open.Parse), so configuration and adapters cannot disagree on it.
type Broker struct {
	Kind BrokerKind
	// Target is the parsed URL; for BrokerEmbedded only Dest is set.
	open.Target
	// Raw is LLMQ_BROKER exactly as given, for open.Open.
	Raw string
}

// Destination is the topic or queue of jobs.
func (b Broker) Destination() string { return b.Dest }

// String is the URL without credentials, for logs.
func (b Broker) String() string { return redact.URL(b.Raw) }

// BrokerForms lists the broker URLs llmq takes: every broker URL error
// and the --broker help say it, the same way. It names each scheme of
// open.Schemes, the one list of them.
const BrokerForms = "kafka://host:port[,host:port]/topic, amqp://user:pass@host:port/vhost?queue=name (amqps:// for TLS), " +
	"memory://name/queue (one process) or embedded"

// ParseBroker parses the forms of LLMQ_BROKER. Its errors never show a
// password and always list BrokerForms.
func ParseBroker(s string) (Broker, error) {
	s = strings.TrimSpace(s)
	if s == string(BrokerEmbedded) {
		return Broker{Kind: BrokerEmbedded, Target: open.Target{Dest: DestinationDefault}, Raw: s}, nil
	}
	scheme, _, ok := strings.Cut(s, "://")
	if !ok {
		return Broker{}, fmt.Errorf("%q is not a broker URL; want %s", redact.URL(s), BrokerForms)
	}
	if !slices.Contains(open.Schemes(), strings.ToLower(scheme)) {
		return Broker{}, fmt.Errorf("%q: unknown scheme %q; want %s", redact.URL(s), scheme, BrokerForms)
	}
	t, err := open.Parse(s)
	if err != nil {
		return Broker{}, fmt.Errorf("%q: %w; want %s", redact.URL(s), err, BrokerForms)
	}
	return Broker{Kind: BrokerKind(t.Kind), Target: t, Raw: s}, nil
}

// checkURL checks that s is an absolute URL with one of the schemes. Its
// errors show s through show (redact.URL, or redact.Endpoint for a URL
// whose path is a secret).
func checkURL(s string, show func(string) string, schemes ...string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL", show(s))
	}
	for _, sc := range schemes {
		if strings.EqualFold(u.Scheme, sc) {
			if u.Host == "" {
				return fmt.Errorf("%q has no host", show(s))
			}
			return nil
		}
	}
	return fmt.Errorf("%q: scheme must be %s", show(s), strings.Join(schemes, " or "))
}
