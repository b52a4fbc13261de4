package kafka

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Defaults of Config and PublisherConfig.
const (
	GroupDefault             = "llmq"
	PrefetchDefault          = 256
	CommitIntervalDefault    = 100 * time.Millisecond
	SessionTimeoutDefault    = 10 * time.Second
	HeartbeatIntervalDefault = time.Second
	RebalanceTimeoutDefault  = 10 * time.Second
	MaxWaitDefault           = 250 * time.Millisecond
	BatchTimeoutDefault      = 5 * time.Millisecond
	BatchSizeDefault         = 1000
	TimeoutDefault           = 10 * time.Second
	// MaxMessageBytesDefault is Kafka's default message.max.bytes: the
	// largest record batch a broker takes.
	MaxMessageBytesDefault = 1048588
)

// RecordBatchOverhead is the size of a record batch's header, which a broker
// counts against max.message.bytes.
const RecordBatchOverhead = 61

// Config configures a Subscriber.
type Config struct {
	// Brokers are the bootstrap addresses (host:port). Required.
	Brokers []string
	// Topic is the topic consumed. Required.
	Topic string
	// Group is the consumer group. Default GroupDefault.
	Group string
	// Prefetch is the most messages outstanding (delivered, not yet acked
	// or nacked). Default PrefetchDefault; must be >= 1.
	Prefetch int
	// CommitInterval is how often the acked prefixes are committed.
	// Default CommitIntervalDefault.
	CommitInterval time.Duration
	// SessionTimeout is the group session timeout: how long a member that
	// stopped heartbeating (a killed process) keeps its partitions.
	// Default SessionTimeoutDefault.
	SessionTimeout time.Duration
	// HeartbeatInterval is how often the member heartbeats; it also bounds
	// how long a member takes to notice a rebalance, and is the wait before
	// joining again after a failed join.
	// Default HeartbeatIntervalDefault.
	HeartbeatInterval time.Duration
	// RebalanceTimeout is how long the coordinator waits for members to
	// rejoin during a rebalance. Default RebalanceTimeoutDefault.
	RebalanceTimeout time.Duration
	// MaxWait is the longest a fetch waits for new data.
	// Default MaxWaitDefault.
	MaxWait time.Duration
	// Timeout bounds each broker request of Depth. Default TimeoutDefault.
	Timeout time.Duration
	// Security is TLS and SASL for every connection (group, partition
	// readers, lag probe). Zero: plaintext, no authentication.
	Security Security
	// Logger receives connection and group errors. Default slog.Default().
	Logger *slog.Logger
}

// Security is how a client secures its connections to the brokers.
type Security struct {
	// TLS, when not nil, is the client side of TLS on every connection.
	// nil: plaintext.
	TLS *tls.Config
	// SASL, when not nil, authenticates every connection: plain.Mechanism
	// or a scram.Mechanism from kafka-go's sasl packages (NewSASL builds
	// them by name). nil: no authentication.
	SASL sasl.Mechanism
}

// SASL mechanism names, as Kafka spells them.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// NewSASL returns the SASL mechanism named (SASLPlain, SASLScramSHA256 or
// SASLScramSHA512, any case) with the credentials.
func NewSASL(mechanism, username, password string) (sasl.Mechanism, error) {
	switch strings.ToUpper(mechanism) {
	case SASLPlain:
		return plain.Mechanism{Username: username, Password: password}, nil
	case SASLScramSHA256:
		return scram.Mechanism(scram.SHA256, username, password)
	case SASLScramSHA512:
		return scram.Mechanism(scram.SHA512, username, password)
	}
	return nil, fmt.Errorf("kafka: SASL mechanism %q (want %s, %s or %s)", mechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512)
}

// dialer is the kafka-go Dialer of the group and the partition readers.
func (s Security) dialer(timeout time.Duration) *kafkago.Dialer {
	return &kafkago.Dialer{Timeout: timeout, DualStack: true, TLS: s.TLS, SASLMechanism: s.SASL}
}

// transport is the kafka-go Transport of the writer and the admin client.
func (s Security) transport() *kafkago.Transport {
	return &kafkago.Transport{TLS: s.TLS, SASL: s.SASL}
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Group = cmp.Or(c.Group, GroupDefault)
	c.Prefetch = cmp.Or(c.Prefetch, PrefetchDefault)
	c.CommitInterval = cmp.Or(c.CommitInterval, CommitIntervalDefault)
	c.SessionTimeout = cmp.Or(c.SessionTimeout, SessionTimeoutDefault)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, HeartbeatIntervalDefault)
	c.RebalanceTimeout = cmp.Or(c.RebalanceTimeout, RebalanceTimeoutDefault)
	c.MaxWait = cmp.Or(c.MaxWait, MaxWaitDefault)
	c.Timeout = cmp.Or(c.Timeout, TimeoutDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case len(c.Brokers) == 0:
		return fmt.Errorf("kafka: Config.Brokers: %w", errNoBrokers)
	case c.Topic == "":
		return fmt.Errorf("kafka: Config.Topic is required")
	case c.Prefetch < 1:
		return fmt.Errorf("kafka: Config.Prefetch must be >= 1, got %d", c.Prefetch)
	case c.CommitInterval < 0:
		return fmt.Errorf("kafka: Config.CommitInterval must not be negative, got %s", c.CommitInterval)
	case c.HeartbeatInterval >= c.SessionTimeout:
		return fmt.Errorf("kafka: Config.HeartbeatInterval (%s) must be below Config.SessionTimeout (%s)", c.HeartbeatInterval, c.SessionTimeout)
	}
	return nil
}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Brokers are the bootstrap addresses (host:port). Required.
	Brokers []string
	// BatchTimeout is the longest a message waits for its batch to fill.
	// Default BatchTimeoutDefault.
	BatchTimeout time.Duration
	// BatchSize is the most messages in one produce batch.
	// Default BatchSizeDefault.
	BatchSize int
	// MaxMessageBytes is the broker's message.max.bytes (or the topics'
	// max.message.bytes when lower): the largest record batch it takes.
	// Produce batches are kept under it, and MaxValueBytes tells how large
	// a message may be. Default MaxMessageBytesDefault; must be at least
	// 1024.
	MaxMessageBytes int
	// TopicPartitions is the partition count of a topic Publish creates;
	// zero means the broker's default.
	TopicPartitions int
	// DisableTopicCreation stops Publish from creating a missing topic.
	// Default false: a missing destination is created on first use.
	DisableTopicCreation bool
	// Timeout bounds topic creation. Default TimeoutDefault.
	Timeout time.Duration
	// Security is TLS and SASL for every connection. Zero: plaintext, no
	// authentication.
	Security Security
	// Logger receives writer errors. Default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c PublisherConfig) WithDefaults() PublisherConfig {
	c.BatchTimeout = cmp.Or(c.BatchTimeout, BatchTimeoutDefault)
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, MaxMessageBytesDefault)
	c.Timeout = cmp.Or(c.Timeout, TimeoutDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c PublisherConfig) validate() error {
	switch {
	case len(c.Brokers) == 0:
		return fmt.Errorf("kafka: PublisherConfig.Brokers: %w", errNoBrokers)
	case c.BatchSize < 1:
		return fmt.Errorf("kafka: PublisherConfig.BatchSize must be >= 1, got %d", c.BatchSize)
	case c.TopicPartitions < 0:
		return fmt.Errorf("kafka: PublisherConfig.TopicPartitions must not be negative, got %d", c.TopicPartitions)
	case c.MaxMessageBytes < 1024:
		return fmt.Errorf("kafka: PublisherConfig.MaxMessageBytes must be at least 1024, got %d", c.MaxMessageBytes)
	}
	return nil
}
