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

// Await consumes the subscription until every job of keys had its result
// event, calling each once per job, in arrival order, from this goroutine;
// every message is acked once handled (events of other jobs, and messages
// that are no result event, are skipped). It returns nil once all
// arrived, each's error, or ctx's error with the number still awaited.
func (r *Results) Await(ctx context.Context, keys []ResultKey, each func(llmq.ResultEvent) error) error {
	waiting := make(map[ResultKey]bool, len(keys))
	for _, k := range keys {
		waiting[k] = true
	}
	if len(waiting) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs, err := r.sub.Consume(ctx)
	if err != nil {
		return fmt.Errorf("producer: await results: %w", err)
	}
	ack := context.WithoutCancel(ctx)
	for len(waiting) > 0 {
		var m *transport.Message
		select {
		case m = <-msgs:
		case <-ctx.Done():
			return fmt.Errorf("producer: await results: %d of %d jobs without a result: %w", len(waiting), len(keys), ctx.Err())
		}
		if m == nil {
			return fmt.Errorf("producer: await results: subscription ended with %d jobs without a result", len(waiting))
		}
		var e llmq.ResultEvent
		if json.Unmarshal(m.Value, &e) == nil && e.Type == llmq.ResultEventType {
			k := ResultKey{Tenant: e.Tenant, ID: e.JobID}
			if waiting[k] {
				delete(waiting, k)
				if err := each(e); err != nil {
					_ = m.Nack(ack)
					return err
				}
			}
		}
		if err := m.Ack(ack); err != nil {
			return fmt.Errorf("producer: await results: ack: %w", err)
		}
	}
	return nil
}
