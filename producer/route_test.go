package producer_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/producer"
)

// TestPublishRoutes: a job that names no route is recorded and published
// with its tenant's, else the deployment's results topic; a job's own
// route wins.
func TestPublishRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, func(c *producer.Config) {
		c.ResultsTopic = "all-results"
		c.TenantReplies = func(tenant string) (llmq.Reply, bool) {
			r, ok := map[string]llmq.Reply{"acme": {To: "acme-results", Webhook: "https://acme.example/h"}}[tenant]
			return r, ok
		}
	})
	ctx := context.Background()
	own := newJob("own")
	own.ReplyTo = &llmq.Reply{To: "mine"}
	other := newJob("other")
	other.Tenant = "globex"
	for _, j := range []*llmq.Job{newJob("tenant"), own, other} {
		_, _, err := p.Publish(ctx, j)
		require.NoError(t, err)
	}
	for id, want := range map[string]llmq.Reply{
		"tenant": {To: "acme-results", Webhook: "https://acme.example/h"},
		"own":    {To: "mine"},
	} {
		rec, err := b.store.Jobs().Get(ctx, "acme", id)
		require.NoError(t, err)
		require.Equal(t, &want, rec.Reply, id)
	}
	rec, err := b.store.Jobs().Get(ctx, "globex", "other")
	require.NoError(t, err)
	require.Equal(t, &llmq.Reply{To: "all-results"}, rec.Reply)

	msgs, err := b.sub.Consume(ctx)
	require.NoError(t, err)
	got, err := llmq.Decode(receive(t, msgs).Value, llmq.DecodeOptions{})
	require.NoError(t, err)
	require.Equal(t, "acme-results", got.ReplyTo.To, "the message carries the route too")
}
