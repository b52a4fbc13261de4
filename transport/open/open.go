package open

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
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

// schemeKinds maps each URL scheme Parse takes to its broker kind.
var schemeKinds = map[string]string{"kafka": KindKafka, "amqp": KindRabbitMQ, "amqps": KindRabbitMQ, "memory": KindMemory}

// Schemes returns the URL schemes Parse takes, sorted.
func Schemes() []string { return slices.Sorted(maps.Keys(schemeKinds)) }

// ErrBadURL is returned for a broker URL that cannot be used.
var ErrBadURL = errors.New("open: bad broker URL")

// Environment variables Open reads for Kafka SASL credentials the URL
// does not carry (keep the password out of the URL: URLs end up in
// process lists and shell histories).
const (
	EnvKafkaUsername = "LLMQ_KAFKA_USERNAME"
	EnvKafkaPassword = "LLMQ_KAFKA_PASSWORD"
)

// Options tune what Open builds; zero values keep the adapters' defaults.
type Options struct {
	// Prefetch overrides the URL's prefetch parameter and the adapter's
	// default: the most messages outstanding at the subscriber.
	Prefetch int
	// Group overrides the URL's Kafka consumer group.
	Group string
	// Logger is passed to the adapters. Default slog.Default().
	Logger *slog.Logger
	// Getenv reads EnvKafkaUsername and EnvKafkaPassword. Default
	// os.Getenv.
	Getenv func(string) string
}

// Target is a parsed broker URL. It holds no password: Open reads it from
// the URL or the environment when it connects.
type Target struct {
	// Kind is KindKafka, KindRabbitMQ or KindMemory.
	Kind string
	// Dest is the topic or queue consumed; dead letters go to Dest+".dlq".
	Dest string
	// Brokers are the Kafka bootstrap addresses.
	Brokers []string
	// Group is the Kafka consumer group ("" = the adapter's default).
	Group string
	// Key is the Kafka message key the producer uses: "id" or "tenant"
	// ("" = the producer's default, id).
	Key string
	// MaxMessageBytes is the Kafka brokers' message.max.bytes
	// (max_message_bytes; 0 = the adapter's default, 1048588).
	MaxMessageBytes int
	// TLS is the Kafka TLS setup.
	TLS TLS
	// SASL is the Kafka SASL mechanism, as Kafka spells it (PLAIN,
	// SCRAM-SHA-256, SCRAM-SHA-512; "" = none), and SASLUsername the user
	// from the URL ("" = EnvKafkaUsername).
	SASL, SASLUsername string
	// AMQPURL is the AMQP URI without llmq's query parameters. It holds
	// the password, if any: never print it (print the broker URL's
	// url.URL.Redacted instead).
	AMQPURL string
	// QueueType and MaxPriority configure RabbitMQ queues ("" / 0 =
	// defaults).
	QueueType   string
	MaxPriority int
	// DeliveryLimit is the RabbitMQ quorum queues' delivery limit
	// (delivery_limit; 0 = the adapter's default, 20; -1 = none).
	DeliveryLimit int
	// Memory is the in-memory broker's name.
	Memory string
	// Prefetch is the URL's prefetch parameter (0 = default).
	Prefetch int
}

// TLS is the TLS setup of a kafka:// URL.
type TLS struct {
	// Enabled is tls=true, or implied by any other tls_ parameter.
	Enabled bool
	// CAFile (tls_ca) is a PEM file of the CAs to trust; "" = the system
	// roots.
	CAFile string
	// CertFile and KeyFile (tls_cert, tls_key) are the PEM client
	// certificate and key, for brokers that authenticate clients by TLS.
	CertFile, KeyFile string
	// ServerName (tls_server_name) is the name the broker certificates
	// must carry; "" = the host dialed.
	ServerName string
	// InsecureSkipVerify (tls_insecure_skip_verify=true) accepts any
	// certificate. For tests only: it gives up the protection TLS is for.
	InsecureSkipVerify bool
}

// kafkaParams are the query parameters of a kafka:// URL.
var kafkaParams = []string{"group", "prefetch", "key", "max_message_bytes", "tls", "tls_ca", "tls_cert", "tls_key",
	"tls_server_name", "tls_insecure_skip_verify", "sasl"}

// Parse parses a broker URL. Its errors never repeat the URL's password.
func Parse(brokerURL string) (Target, error) {
	t, _, err := parse(brokerURL)
	return t, err
}

// parse is Parse that also returns the password of the URL's userinfo.
func parse(brokerURL string) (Target, string, error) {
	u, err := url.Parse(brokerURL)
	if err != nil {
		return Target{}, "", fmt.Errorf("%w: %s: %w", ErrBadURL, redact(brokerURL), parseError(brokerURL))
	}
	q := u.Query()
	t := Target{Dest: DestDefault}
	if p := q.Get("prefetch"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return Target{}, "", fmt.Errorf("%w: prefetch=%q must be a positive integer", ErrBadURL, p)
		}
		t.Prefetch = n
	}
	var password string
	t.Kind = schemeKinds[u.Scheme]
	switch t.Kind {
	case KindKafka:
		if password, err = parseKafka(u, q, &t); err != nil {
			return Target{}, "", err
		}
	case KindRabbitMQ:
		if u.Port() != "" {
			if err := checkHostPort(u.Host); err != nil {
				return Target{}, "", err
			}
		}
		if queue := q.Get("queue"); queue != "" {
			t.Dest = queue
		}
		t.QueueType = q.Get("queue_type")
		if mp := q.Get("max_priority"); mp != "" {
			n, err := strconv.Atoi(mp)
			if err != nil {
				return Target{}, "", fmt.Errorf("%w: max_priority=%q must be an integer", ErrBadURL, mp)
			}
			t.MaxPriority = n
		}
		if dl := q.Get("delivery_limit"); dl != "" {
			n, err := strconv.Atoi(dl)
			if err != nil || n == 0 || n < -1 {
				return Target{}, "", fmt.Errorf("%w: delivery_limit=%q must be a positive integer, or -1 for none", ErrBadURL, dl)
			}
			t.DeliveryLimit = n
		}
		for _, k := range []string{"queue", "queue_type", "max_priority", "delivery_limit", "prefetch"} {
			q.Del(k)
		}
		amqpURL := *u
		amqpURL.RawQuery = q.Encode()
		t.AMQPURL = amqpURL.String()
	case KindMemory:
		t.Memory = u.Host
		if queue := strings.Trim(u.Path, "/"); queue != "" {
			t.Dest = queue
		}
	default:
		return Target{}, "", fmt.Errorf("%w: scheme %q (want one of %s)", ErrBadURL, u.Scheme, strings.Join(Schemes(), ", "))
	}
	return t, password, nil
}

// parseKafka fills t from a kafka:// URL and returns the userinfo's
// password.
func parseKafka(u *url.URL, q url.Values, t *Target) (string, error) {
	for k := range q {
		if !slices.Contains(kafkaParams, k) {
			return "", fmt.Errorf("%w: unknown kafka parameter %q (known: %s)", ErrBadURL, k, strings.Join(kafkaParams, ", "))
		}
	}
	for _, h := range strings.Split(u.Host, ",") {
		if err := checkHostPort(h); err != nil {
			return "", err
		}
		t.Brokers = append(t.Brokers, h)
	}
	if topic := strings.Trim(u.Path, "/"); topic != "" {
		if strings.Contains(topic, "/") {
			return "", fmt.Errorf("%w: topic %q contains '/'", ErrBadURL, topic)
		}
		t.Dest = topic
	}
	t.Group = q.Get("group")
	switch t.Key = q.Get("key"); t.Key {
	case "", "id", "tenant":
	default:
		return "", fmt.Errorf("%w: key=%q (want id or tenant)", ErrBadURL, t.Key)
	}
	if m := q.Get("max_message_bytes"); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < 1024 {
			return "", fmt.Errorf("%w: max_message_bytes=%q must be an integer of at least 1024", ErrBadURL, m)
		}
		t.MaxMessageBytes = n
	}
	if err := parseTLS(q, &t.TLS); err != nil {
		return "", err
	}
	var password string
	if u.User != nil {
		t.SASLUsername = u.User.Username()
		password, _ = u.User.Password()
	}
	switch mech := q.Get("sasl"); strings.ToLower(mech) {
	case "":
		if u.User != nil {
			return "", fmt.Errorf("%w: the URL carries credentials but no sasl= mechanism (plain, scram-sha-256 or scram-sha-512)", ErrBadURL)
		}
	case "plain", "scram-sha-256", "scram-sha-512":
		t.SASL = strings.ToUpper(mech)
	default:
		return "", fmt.Errorf("%w: sasl=%q (want plain, scram-sha-256 or scram-sha-512)", ErrBadURL, mech)
	}
	return password, nil
}

// parseTLS reads the tls parameters of a kafka:// URL.
func parseTLS(q url.Values, t *TLS) error {
	boolParam := func(name string) (bool, bool, error) {
		v := q.Get(name)
		if v == "" {
			return false, false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, false, fmt.Errorf("%w: %s=%q must be true or false", ErrBadURL, name, v)
		}
		return b, true, nil
	}
	enabled, set, err := boolParam("tls")
	if err != nil {
		return err
	}
	if t.InsecureSkipVerify, _, err = boolParam("tls_insecure_skip_verify"); err != nil {
		return err
	}
	t.CAFile, t.CertFile, t.KeyFile, t.ServerName = q.Get("tls_ca"), q.Get("tls_cert"), q.Get("tls_key"), q.Get("tls_server_name")
	implied := t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.InsecureSkipVerify
	switch {
	case set && !enabled && implied:
		return fmt.Errorf("%w: tls=false with other tls_ parameters", ErrBadURL)
	case (t.CertFile == "") != (t.KeyFile == ""):
		return fmt.Errorf("%w: tls_cert and tls_key go together", ErrBadURL)
	}
	t.Enabled = enabled || implied
	return nil
}

// parseError says why raw does not parse as a URL without repeating its
// password: url.Parse's error quotes the whole URL, and its reason may
// quote part of the password too (a "/" in it ends the host early), so
// the reason is taken from the URL with its userinfo masked.
func parseError(raw string) error {
	masked := redact(raw)
	_, err := url.Parse(masked)
	var ue *url.Error
	switch {
	case errors.As(err, &ue):
		return ue.Err
	case err != nil:
		return err
	case masked != raw:
		return errors.New("invalid user or password (escape reserved characters in them with %XX)")
	}
	return errors.New("not a URL")
}

// redact masks the userinfo of a URL that did not parse: everything
// between "://" and the last "@".
func redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		if at := strings.LastIndex(raw, "@"); at >= 0 {
			return "xxxxx" + raw[at:]
		}
		return raw
	}
	return scheme + "://xxxxx" + rest[at:]
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
	t, password, err := parse(brokerURL)
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
		getenv := opts.Getenv
		if getenv == nil {
			getenv = os.Getenv
		}
		sec, err := kafkaSecurity(t, password, getenv)
		if err != nil {
			return nil, nil, err
		}
		pub, err := kafka.NewPublisher(kafka.PublisherConfig{
			Brokers: t.Brokers, MaxMessageBytes: t.MaxMessageBytes, Security: sec, Logger: opts.Logger,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("open: %w", err)
		}
		sub, err := kafka.NewSubscriber(kafka.Config{
			Brokers: t.Brokers, Topic: t.Dest, Group: group, Prefetch: prefetch, Security: sec, Logger: opts.Logger,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("open: %w", errors.Join(err, pub.Close()))
		}
		return pub, sub, nil
	case KindRabbitMQ:
		cfg := rabbitmq.Config{
			URL: t.AMQPURL, Queue: t.Dest, QueueType: t.QueueType, MaxPriority: t.MaxPriority,
			DeliveryLimit: t.DeliveryLimit, Prefetch: prefetch, Logger: opts.Logger,
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

// kafkaSecurity builds the TLS config and SASL mechanism of t; password is
// the URL's, and getenv supplies the credentials the URL lacks.
func kafkaSecurity(t Target, password string, getenv func(string) string) (kafka.Security, error) {
	var sec kafka.Security
	if t.TLS.Enabled {
		cfg, err := tlsConfig(t.TLS)
		if err != nil {
			return kafka.Security{}, err
		}
		sec.TLS = cfg
	}
	if t.SASL != "" {
		user := cmp.Or(t.SASLUsername, getenv(EnvKafkaUsername))
		password = cmp.Or(password, getenv(EnvKafkaPassword))
		if user == "" || password == "" {
			return kafka.Security{}, fmt.Errorf("open: sasl=%s needs a user and a password: in the URL (kafka://user:password@host...) or in %s and %s",
				strings.ToLower(t.SASL), EnvKafkaUsername, EnvKafkaPassword)
		}
		mech, err := kafka.NewSASL(t.SASL, user, password)
		if err != nil {
			return kafka.Security{}, fmt.Errorf("open: %w", err)
		}
		sec.SASL = mech
	}
	return sec, nil
}

// tlsConfig builds the client TLS config of a kafka:// URL.
func tlsConfig(t TLS) (*tls.Config, error) {
	// InsecureSkipVerify only when the URL asks for it (tests).
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("open: tls_ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("open: tls_ca: no PEM certificate in %s", t.CAFile)
		}
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("open: tls_cert, tls_key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// WithDest returns brokerURL with its destination (Kafka topic, RabbitMQ
// queue, memory queue) replaced by dest, to open a subscriber of another
// destination on the same broker (a reply queue, a results topic).
func WithDest(brokerURL, dest string) (string, error) {
	t, err := Parse(brokerURL)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(brokerURL)
	if err != nil {
		return "", fmt.Errorf("%w: %s", ErrBadURL, redact(brokerURL))
	}
	switch t.Kind {
	case KindRabbitMQ:
		q := u.Query()
		q.Set("queue", dest)
		u.RawQuery = q.Encode()
	default:
		u.Path = "/" + dest
	}
	return u.String(), nil
}
