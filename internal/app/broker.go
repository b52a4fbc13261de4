package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/llmq/llmq/internal/backoff"
)

// The broker check at start-up.
const (
	// brokerProbeTimeout bounds one probe. RabbitMQ answers a wrong
	// password only after about 3 s.
	brokerProbeTimeout = 10 * time.Second
	// BrokerRetryMin and BrokerRetryMax bound the wait between two probes
	// of a broker that is down when a worker or the API starts: it doubles
	// from the first to the second.
	BrokerRetryMin = time.Second
	BrokerRetryMax = 30 * time.Second
)

var (
	// ErrBrokerAuth: the broker refused the credentials of the broker URL
	// (a wrong user or password, or no access to the vhost). Retrying
	// cannot fix it.
	ErrBrokerAuth = errors.New("the broker refused the credentials (authentication failure)")
	// ErrBrokerUnavailable: the broker could not be reached.
	ErrBrokerUnavailable = errors.New("the broker cannot be reached")
)

// waitForBroker probes the broker (one depth measurement) before anything
// runs, so that a wrong password is said as such at once instead of as a
// timeout later. A worker or an API whose broker is down retries with
// backoff, logging why, until it answers or ctx ends (a broker started
// after llmq is normal in a deployment); a one-shot command fails at once.
func (a *App) waitForBroker(ctx context.Context) error {
	retry := a.cfg.Worker != nil || a.cfg.API != nil
	policy := backoff.Policy{Base: BrokerRetryMin, Max: BrokerRetryMax}
	for attempt := 1; ; attempt++ {
		wait := policy.Exp(attempt - 1)
		pctx, cancel := context.WithTimeout(ctx, brokerProbeTimeout)
		_, err := a.sub.Depth(pctx)
		cancel()
		switch {
		case err == nil:
			if attempt > 1 {
				a.log.Info("broker reachable", slog.String("broker", a.brokerName()), slog.Int("attempts", attempt))
			}
			return nil
		case isAuthFailure(err):
			return fmt.Errorf("%w: %s: check the user and password of %s", ErrBrokerAuth, a.brokerName(), "LLMQ_BROKER")
		case !retry || ctx.Err() != nil:
			return fmt.Errorf("%w: %s: %w", ErrBrokerUnavailable, a.brokerName(), err)
		}
		a.log.Warn("broker unavailable at start-up; retrying", slog.String("broker", a.brokerName()),
			slog.Int("attempt", attempt), slog.Duration("retry_in", wait), slog.Any("error", err))
		t := a.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %s: %w (gave up: %w)", ErrBrokerUnavailable, a.brokerName(), err, context.Cause(ctx))
		case <-t.Chan():
		}
	}
}

// isAuthFailure reports whether err is a broker's refusal of the
// credentials: RabbitMQ's ACCESS_REFUSED (403), Kafka's SASL
// authentication failure.
func isAuthFailure(err error) bool {
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Code == amqp.AccessRefused {
		return true
	}
	return errors.Is(err, kafkago.SASLAuthenticationFailed)
}
