package producer

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/transport"
)

// Results awaits the result events of jobs a producer published with a
// reply (llmq.Job.ReplyTo naming a reply queue or results topic), by
// subscribing to that queue or topic: no polling (docs/design/notifications.md).
// The notifier delivers each event at least once; Results hands out each
// job's event once, deduplicating on the job's key.
type Results struct {
	sub transport.Subscriber
}

// NewResults awaits results on sub, a subscriber of the reply queue or
// results topic; Await consumes it, and the caller closes it after.
func NewResults(sub transport.Subscriber) *Results { return &Results{sub: sub} }

// ResultKey is the key of a job whose result is awaited: tenant and id.
type ResultKey struct{ Tenant, ID string }

// Await consumes the subscription until every job whose key came on
// keys had its result event, and keys is closed. It calls each once per
// such job, in arrival order, from this goroutine; an event that arrives
// before its job's key (the job ended before the caller sent it) is held
// until the key comes or keys closes. Every message is acked once read
// (events of other jobs, and messages that are no result event, are
// skipped). It returns nil once all arrived, each's error, or ctx's error
// with the number still awaited. Subscribe before publishing: a Kafka
// group of its own reads the topic from its start, a RabbitMQ reply queue
// exists once Await consumes it.
func (r *Results) Await(ctx context.Context, keys <-chan ResultKey, each func(llmq.ResultEvent) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs, err := r.sub.Consume(ctx)
	if err != nil {
		return fmt.Errorf("producer: await results: %w", err)
	}
	ack := context.WithoutCancel(ctx)
	waiting := map[ResultKey]bool{}
	early := map[ResultKey]llmq.ResultEvent{}
	handled := map[ResultKey]bool{}
	awaited := 0
	for keys != nil || len(waiting) > 0 {
		select {
		case k, ok := <-keys:
			if !ok {
				keys, early = nil, nil
				continue
			}
			if handled[k] || waiting[k] {
				continue
			}
			awaited++
			if e, ok := early[k]; ok {
				delete(early, k)
				handled[k] = true
				if err := each(e); err != nil {
					return err
				}
				continue
			}
			waiting[k] = true
		case m := <-msgs:
			if m == nil {
				return fmt.Errorf("producer: await results: subscription ended with %d jobs without a result", len(waiting))
			}
			var e llmq.ResultEvent
			if json.Unmarshal(m.Value, &e) == nil && e.Type == llmq.ResultEventType {
				k := ResultKey{Tenant: e.Tenant, ID: e.JobID}
				switch {
				case waiting[k]:
					delete(waiting, k)
					handled[k] = true
					if err := each(e); err != nil {
						_ = m.Nack(ack)
						return err
					}
				case keys != nil && !handled[k]:
					early[k] = e
				}
			}
			if err := m.Ack(ack); err != nil {
				return fmt.Errorf("producer: await results: ack: %w", err)
			}
		case <-ctx.Done():
			return fmt.Errorf("producer: await results: %d of %d jobs without a result: %w", len(waiting), awaited, ctx.Err())
		}
	}
	return nil
}

// AwaitKeys is Await for a known set of keys.
func (r *Results) AwaitKeys(ctx context.Context, keys []ResultKey, each func(llmq.ResultEvent) error) error {
	c := make(chan ResultKey, len(keys))
	for _, k := range keys {
		c <- k
	}
	close(c)
	return r.Await(ctx, c, each)
}
