package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
)

// The ingest's tenants (docs/design/admission.md). A broker hands messages
// over in order, so a pause behind a flood would keep the other tenants'
// messages out too: the window pauses only while no tenant holds more than
// its share of it; past its share a tenant's jobs are recorded (fair share
// claims the others' first) up to Config.TenantCap, and its messages past
// the cap are dead-lettered tenant_queue_full. The counts are read with the
// window's and follow this worker's records and claims in between.

// tenantCount is the count of each tenant's jobs behind the ingest: the
// last read of its queued and in-flight jobs, and what this worker
// recorded and claimed since. Its queued jobs (held against its share of
// the window, as the window counts) follow both; the jobs it holds
// (against its cap) follow the records only: a claim moves a job from
// queued to in flight, and the jobs that end are seen at the next read.
type tenantCount struct {
	mu sync.Mutex
	// queued and inFlight are the tenants holding jobs at the last read,
	// weight the sum of their weights; recorded and claimed count since.
	queued, inFlight  map[string]int64
	weight            float64
	recorded, claimed map[string]int64
}

// held is tenant's jobs queued or in flight.
func (c *tenantCount) held(tenant string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queued[tenant] + c.inFlight[tenant] + c.recorded[tenant]
}

// set records a read.
func (c *tenantCount) set(queued, inFlight map[string]int64, weight float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queued, c.inFlight, c.weight = queued, inFlight, weight
	c.recorded, c.claimed = map[string]int64{}, map[string]int64{}
}

// add counts n jobs recorded (claimed false) or claimed for tenant.
func (c *tenantCount) add(tenant string, n int64, claimed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := &c.recorded
	if claimed {
		m = &c.claimed
	}
	if *m == nil {
		*m = map[string]int64{}
	}
	(*m)[tenant] += n
}

// overShare reports whether a tenant holds more queued jobs than its share
// of window (llmq.ShareOf its weight among the tenants counted) and slack:
// the share is soft by what the ingest loops have in hand, as the window
// is, so that the order in which two tenants' batches land does not decide
// whether ingestion pauses.
func (c *tenantCount) overShare(window, slack int, ts llmq.Tenants) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	weight := c.weight
	for t := range c.recorded {
		if _, ok := c.queued[t]; !ok {
			weight += ts.Weight(t)
		}
	}
	for _, counts := range []map[string]int64{c.queued, c.recorded} {
		for t := range counts {
			n := c.queued[t] + c.recorded[t] - c.claimed[t]
			if float64(n) > float64(window)*llmq.ShareOf(ts.Weight(t), weight)+float64(slack) {
				return true
			}
		}
	}
	return false
}

// tenantLimit is how far a read counts each tenant's queued jobs: its cap,
// or without one just past the whole window (any count over a share).
func (in *ingester) tenantLimit() int64 {
	if in.cfg.TenantCap > 0 {
		return int64(in.cfg.TenantCap)
	}
	return int64(max(in.cfg.Window, 0)) + 1
}

// readTenants reads the tenants' counts when due (windowRecount after the
// last read): their jobs in flight and queued, each up to tenantLimit. A
// failed read keeps the last one.
func (in *ingester) readTenants(ctx context.Context) {
	if in.cfg.Window < 0 && in.cfg.TenantCap < 0 {
		return
	}
	now := in.cfg.Clock.Now().UnixNano()
	last := in.tenantsReadAt.Load()
	if now-last < int64(windowRecount) || !in.tenantsReadAt.CompareAndSwap(last, now) {
		return
	}
	ts, err := in.cfg.Store.QueueTenants(ctx, time.Time{})
	if err != nil {
		return
	}
	names, limits := make([]string, len(ts)), make([]int64, len(ts))
	for i, t := range ts {
		names[i], limits[i] = t.Tenant, in.tenantLimit()
	}
	counts, err := in.cfg.Store.CountQueued(ctx, names, limits)
	if err != nil {
		return
	}
	queued, inFlight, weight := make(map[string]int64, len(ts)), make(map[string]int64, len(ts)), 0.0
	for i, t := range ts {
		queued[t.Tenant], inFlight[t.Tenant] = counts[i], t.InFlight
		weight += in.cfg.Tenants().Weight(t.Tenant)
	}
	in.tenants.set(queued, inFlight, weight)
}

// tenantAdmission decides, message by message, which of a batch's jobs
// their tenants' caps let in: pending counts the batch's jobs let in so
// far.
type tenantAdmission struct {
	in      *ingester
	pending map[string]int64
}

// admit reports whether j may be recorded, and counts it when it may.
func (a *tenantAdmission) admit(j *llmq.Job) bool {
	if a.in.cfg.TenantCap < 0 {
		return true
	}
	if a.in.tenants.held(j.Tenant)+a.pending[j.Tenant] >= int64(a.in.cfg.TenantCap) {
		return false
	}
	if a.pending == nil {
		a.pending = map[string]int64{}
	}
	a.pending[j.Tenant]++
	return true
}

// tenantFull is the dead letter of a message whose tenant holds its cap.
func (in *ingester) tenantFull(j *llmq.Job) dlq.Letter {
	return dlq.Letter{JobID: j.ID, Tenant: j.Tenant, Reason: dlq.ReasonTenantQueueFull,
		LastError: fmt.Sprintf("tenant %q holds %d jobs queued or in flight, its cap (ingest.tenant_cap %d)",
			j.Tenant, in.tenants.held(j.Tenant), in.cfg.TenantCap)}
}

// countRecorded counts the jobs of items that were created.
func (in *ingester) countRecorded(items []ingestItem, created []bool) {
	for i, it := range items {
		if created[i] {
			in.tenants.add(it.job.Job.Tenant, 1, false)
		}
	}
}
