package rabbitmq

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"
)

// Queue types for Config.QueueType.
const (
	// QueueQuorum is a replicated quorum queue; it ignores priorities.
	QueueQuorum = "quorum"
	// QueueClassic is a classic queue with x-max-priority.
	QueueClassic = "classic"
)

// Defaults of Config.
const (
	QueueTypeDefault     = QueueQuorum
	MaxPriorityDefault   = 9
	PrefetchDefault      = 256
	ConfirmWindowDefault = 1000
	ReconnectMinDefault  = 100 * time.Millisecond
	ReconnectMaxDefault  = 5 * time.Second
	DialTimeoutDefault   = 10 * time.Second
	// DeliveryLimitDefault is RabbitMQ 4's own default delivery limit of
	// quorum queues, declared explicitly so that every version behaves the
	// same and the message is dead-lettered, not dropped.
	DeliveryLimitDefault = 20
)

// RejectedSuffix names the queue a queue's rejected messages go to:
// "llmq.jobs" dead-letters to "llmq.jobs.rejected".
const RejectedSuffix = ".rejected"

// Config configures a Publisher or a Subscriber.
type Config struct {
	// URL is the AMQP URI, amqp://user:pass@host:port/vhost. Required.
	URL string
	// Queue is the queue a Subscriber consumes; unused by a Publisher.
	Queue string
	// QueueType is the type of the queues declared: QueueQuorum or
	// QueueClassic. Default QueueTypeDefault.
	QueueType string
	// MaxPriority is the x-max-priority of classic queues (1..255).
	// Default MaxPriorityDefault; ignored for quorum queues.
	MaxPriority int
	// DeliveryLimit is the x-delivery-limit of quorum queues: a message
	// delivered more than this many times (nacked, or unacked when its
	// consumer went away) is dead-lettered to the queue's "<queue>.rejected"
	// queue, which the Subscriber consumes and hands out with
	// Message.Rejected set. Default DeliveryLimitDefault; -1 declares no
	// limit (RabbitMQ 3 then redelivers forever; RabbitMQ 4 applies its
	// default of 20 and dead-letters). Classic queues have no delivery
	// limit and ignore it.
	DeliveryLimit int
	// Prefetch is the QoS prefetch count and the most messages outstanding
	// (delivered, not yet acked or nacked), 1..65535.
	// Default PrefetchDefault.
	Prefetch int
	// ConfirmWindow is the most publishes awaiting their broker confirm in
	// one Publish. Default ConfirmWindowDefault.
	ConfirmWindow int
	// ReconnectMin and ReconnectMax bound the exponential backoff between
	// redials. Defaults ReconnectMinDefault and ReconnectMaxDefault.
	ReconnectMin, ReconnectMax time.Duration
	// DialTimeout bounds one dial. Default DialTimeoutDefault.
	DialTimeout time.Duration
	// Logger receives connection events. Default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.QueueType = cmp.Or(c.QueueType, QueueTypeDefault)
	c.MaxPriority = cmp.Or(c.MaxPriority, MaxPriorityDefault)
	c.Prefetch = cmp.Or(c.Prefetch, PrefetchDefault)
	c.DeliveryLimit = cmp.Or(c.DeliveryLimit, DeliveryLimitDefault)
	c.ConfirmWindow = cmp.Or(c.ConfirmWindow, ConfirmWindowDefault)
	c.ReconnectMin = cmp.Or(c.ReconnectMin, ReconnectMinDefault)
	c.ReconnectMax = cmp.Or(c.ReconnectMax, ReconnectMaxDefault)
	c.DialTimeout = cmp.Or(c.DialTimeout, DialTimeoutDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.URL == "":
		return fmt.Errorf("rabbitmq: Config.URL is required")
	case c.QueueType != QueueQuorum && c.QueueType != QueueClassic:
		return fmt.Errorf("rabbitmq: Config.QueueType must be %q or %q, got %q", QueueQuorum, QueueClassic, c.QueueType)
	case c.MaxPriority < 1 || c.MaxPriority > 255:
		return fmt.Errorf("rabbitmq: Config.MaxPriority must be 1..255, got %d", c.MaxPriority)
	case c.DeliveryLimit < -1:
		return fmt.Errorf("rabbitmq: Config.DeliveryLimit must be positive, or -1 for none, got %d", c.DeliveryLimit)
	case c.Prefetch < 1 || c.Prefetch > 65535:
		return fmt.Errorf("rabbitmq: Config.Prefetch must be 1..65535, got %d", c.Prefetch)
	case c.ConfirmWindow < 1:
		return fmt.Errorf("rabbitmq: Config.ConfirmWindow must be >= 1, got %d", c.ConfirmWindow)
	case c.ReconnectMin > c.ReconnectMax:
		return fmt.Errorf("rabbitmq: Config.ReconnectMin (%s) must not exceed Config.ReconnectMax (%s)", c.ReconnectMin, c.ReconnectMax)
	}
	return nil
}
