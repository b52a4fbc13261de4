package producer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/producer"
)

// batchOf returns n jobs of tenant, ids prefix-0 to prefix-(n-1).
func batchOf(tenant, prefix string, n int) []*llmq.Job {
	jobs := make([]*llmq.Job, n)
	for i := range jobs {
		jobs[i] = newJob(fmt.Sprintf("%s-%d", prefix, i))
		jobs[i].Tenant = tenant
	}
	return jobs
}

// TestTenantShares: one tenant filling the queue is refused at its share
// (tenant_queue_full) while another tenant is admitted; each is told its
// own depth, share, drain estimate and state. With a hard depth of 20, a
// tenant alone may hold 10 (half: room is kept for one more tenant), and
// once two hold jobs each may hold 20 × 1/2 = 10, a tenant of weight 3
// 20 × 3/4 = 15.
func TestTenantShares(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, func(c *producer.Config) {
		c.SoftDepth, c.HardDepth, c.RateWindow, c.QuotaRatePerMin = 8, 20, time.Minute, 60
		c.Tenants = llmq.Tenants{"heavy": {Scope: llmq.Scope{Weight: 3}}, "fixed": {Scope: llmq.Scope{SoftDepth: 1, HardDepth: 2}}}
	})
	ctx := context.Background()

	_, q, err := p.PublishBatch(ctx, batchOf("a", "a1", 10))
	require.NoError(t, err, "a holds nothing yet")
	require.Equal(t, &producer.TenantQueue{Tenant: "a", Weight: 1, SoftShare: 4, HardShare: 10, CompletionRatePerMin: 30,
		DrainKnown: true, State: producer.StateOK}, q.Tenant, "measured before the batch: a alone is given half the queue's rate")
	_, _, err = p.PublishBatch(ctx, batchOf("a", "a2", 10))
	var bp *producer.ErrBackpressure
	require.ErrorAs(t, err, &bp, "a holds its hard share")
	require.Equal(t, producer.ReasonTenantQueueFull, bp.Reason)
	require.Equal(t, "a", bp.Tenant)
	require.Equal(t, int64(10), bp.Queue.Tenant.Depth)
	require.Equal(t, producer.StateRejecting, bp.Queue.Tenant.State)
	require.Equal(t, producer.StateThrottled, bp.Queue.State, "the queue itself (10 of 20) admits")
	require.Equal(t, 12*time.Second, bp.RetryAfter, "a's 10 - its soft share 4, at its share of the quotas' rate: 30/min")

	_, q, err = p.PublishBatch(ctx, batchOf("b", "b", 3))
	require.NoError(t, err, "b is admitted while a is refused")
	require.Equal(t, int64(0), q.Tenant.Depth)
	require.Equal(t, int64(10), q.Tenant.HardShare, "a and b hold jobs: half each")
	require.Equal(t, producer.StateOK, q.Tenant.State)
	q, err = p.QueueOf(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, int64(3), q.Tenant.Depth)
	require.Equal(t, 6*time.Second, q.Tenant.EstimatedDrain, "3 jobs at 30/min")

	_, q, err = p.PublishBatch(ctx, batchOf("heavy", "h1", 14))
	require.NoError(t, err)
	require.Equal(t, int64(12), q.Tenant.HardShare, "weight 3 of 5 (a, b, heavy): 20 × 3/5")
	_, _, err = p.PublishBatch(ctx, batchOf("heavy", "h2", 1))
	require.ErrorAs(t, err, &bp)
	require.Equal(t, producer.ReasonQueueFull, bp.Reason, "the queue's own hard depth, the last resort: 27 of 20")

	_, _, err = p.PublishBatch(ctx, batchOf("fixed", "f", 1))
	require.ErrorAs(t, err, &bp)
	require.Equal(t, producer.ReasonQueueFull, bp.Reason)
	b.work(t, 27)
	_, q, err = p.PublishBatch(ctx, batchOf("fixed", "f", 2))
	require.NoError(t, err)
	require.Equal(t, [2]int64{1, 2}, [2]int64{q.Tenant.SoftShare, q.Tenant.HardShare}, "configured: its own depths")
	_, _, err = p.PublishBatch(ctx, batchOf("fixed", "g", 1))
	require.ErrorAs(t, err, &bp)
	require.Equal(t, producer.ReasonTenantQueueFull, bp.Reason)

	q, ts, err := p.Tenants(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), q.Depth)
	require.Len(t, ts, 1)
	require.Equal(t, "fixed", ts[0].Tenant)
	require.Equal(t, int64(2), ts[0].Depth)
}

// TestProjectDepths: a project with depths of its own is told throttled
// from its soft depth and refused (tenant_queue_full, naming it) at its
// hard depth, while its tenant's other projects are admitted.
func TestProjectDepths(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, func(c *producer.Config) {
		c.Tenants = llmq.Tenants{"acme": {Projects: map[string]llmq.Scope{"bulk": {SoftDepth: 1, HardDepth: 3}}}}
	})
	ctx := context.Background()
	project := func(name string, jobs []*llmq.Job) []*llmq.Job {
		for _, j := range jobs {
			j.Project = name
		}
		return jobs
	}
	_, q, err := p.PublishBatch(ctx, project("bulk", batchOf("acme", "b1", 2)))
	require.NoError(t, err)
	require.Equal(t, producer.StateOK, q.Tenant.State)
	_, q, err = p.PublishBatch(ctx, project("bulk", batchOf("acme", "b2", 1)))
	require.NoError(t, err)
	require.Equal(t, producer.StateThrottled, q.Tenant.State, "bulk holds 2, past its soft depth 1")
	_, _, err = p.PublishBatch(ctx, append(project("web", batchOf("acme", "w1", 1)), project("bulk", batchOf("acme", "b3", 1))...))
	var bp *producer.ErrBackpressure
	require.ErrorAs(t, err, &bp)
	require.Equal(t, [5]any{producer.ReasonTenantQueueFull, "acme", "bulk", int64(3), 1},
		[5]any{bp.Reason, bp.Tenant, bp.Project, bp.ProjectDepth, bp.Index})
	_, q, err = p.PublishBatch(ctx, project("web", batchOf("acme", "w2", 2)))
	require.NoError(t, err, "another project of acme is admitted")
	require.Equal(t, producer.StateOK, q.Tenant.State)
	b.work(t, 5)
	_, _, err = p.PublishBatch(ctx, project("bulk", batchOf("acme", "b4", 1)))
	require.NoError(t, err, "bulk's jobs ended")
}
