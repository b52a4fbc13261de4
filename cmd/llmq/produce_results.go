package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/open"
)

// resultsRun awaits the result events of the jobs `llmq produce
// --results-to` creates, subscribed to the reply queue or results topic
// before the first publish, and writes each as a JSON line.
type resultsRun struct {
	dest  string
	keys  chan producer.ResultKey
	sub   transport.Subscriber
	pub   transport.Publisher
	done  chan error
	ended chan struct{} // closed when the wait ended
	close sync.Once
}

// startResults subscribes to dest on broker and starts writing the result
// events of the jobs that created sends to out, for at most timeout.
func startResults(ctx context.Context, broker config.Broker, dest string, timeout time.Duration, out io.Writer) (*resultsRun, error) {
	if broker.Kind == config.BrokerEmbedded {
		return nil, errors.New("--results-to needs a RabbitMQ or Kafka broker (LLMQ_BROKER)")
	}
	u, err := open.WithDest(broker.Raw, dest)
	if err != nil {
		return nil, err
	}
	// A consumer group of its own: this run reads every result on the
	// topic, whoever else reads it.
	pub, sub, err := open.Open(ctx, u, open.Options{Group: "llmq-produce-" + uuid.NewString(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("--results-to %s: %w", dest, err)
	}
	r := &resultsRun{dest: dest, keys: make(chan producer.ResultKey, 4096), sub: sub, pub: pub, done: make(chan error, 1), ended: make(chan struct{})}
	enc := json.NewEncoder(out)
	go func() {
		actx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		r.done <- producer.NewResults(sub).Await(actx, r.keys, func(e llmq.ResultEvent) error { return enc.Encode(e) })
		close(r.ended)
	}()
	return r, nil
}

// created awaits the result of a job the run created (nil r: none).
func (r *resultsRun) created(rc producer.Receipt) {
	if r == nil {
		return
	}
	select {
	case r.keys <- producer.ResultKey{Tenant: rc.Tenant, ID: rc.ID}:
	case <-r.ended: // the wait ended (timeout, interrupt): wait says why
	}
}

// wait ends the list of jobs and waits for their results.
func (r *resultsRun) wait() error {
	r.close.Do(func() { close(r.keys) })
	err := <-r.done
	return errors.Join(err, r.sub.Close(), r.pub.Close())
}
