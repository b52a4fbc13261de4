package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
)

// The ingest's tenants (docs/design/admission.md). The broker hands
// messages over in the order they came: while a flooding tenant's messages
// are ahead of another tenant's, a pause of ingestion would keep the other
// tenant's out too. So the ingest window pauses only while no tenant holds
// more than its share of it (a backlog spread over the tenants, which the
// broker then buffers); past its share, a tenant's jobs are recorded (the
// claim order's fair share puts the others' first) up to Config.TenantCap
// jobs queued or in flight, and its messages past the cap are dead-lettered
// tenant_queue_full. The tenants' counts are read with the window's every
// windowRecount (each up to the cap, or just past the window without one)
// and follow this worker's records in between.

// tenantCount is the count of each tenant's jobs behind the ingest: the
// last read, and what this worker recorded since (claims are not
// subtracted: a floor until the next read).
type tenantCount struct {
	mu sync.Mutex
	// read are the tenants holding jobs at the last read, weight the sum
	// of their weights; recorded counts the records since.
	read     map[string]int64
	weight   float64
	recorded map[string]int64
}

// value is tenant's count.
func (c *tenantCount) value(tenant string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.read[tenant] + c.recorded[tenant]
}

// set records a read.
func (c *tenantCount) set(read map[string]int64, weight float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.read, c.weight, c.recorded = read, weight, map[string]int64{}
}

// add counts n jobs recorded for tenant.
func (c *tenantCount) add(tenant string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recorded == nil {
		c.recorded = map[string]int64{}
	}
	c.recorded[tenant] += n
}

// overShare reports whether a tenant holds more than its share of window:
// llmq.ShareOf its weight among the tenants counted.
func (c *tenantCount) overShare(window int, ts llmq.Tenants) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	weight := c.weight
	for t := range c.recorded {
		if _, ok := c.read[t]; !ok {
			weight += ts.Weight(t)
		}
	}
	for _, counts := range []map[string]int64{c.read, c.recorded} {
		for t := range counts {
			n := c.read[t] + c.recorded[t]
			if float64(n) > float64(window)*llmq.ShareOf(ts.Weight(t), weight) {
				return true
			}
		}
	}
	return false
}

// tenantLimit is how far a read counts each tenant's queued jobs: its cap,
// or without one just past the whole window (any count over a share).
func (w *Worker) tenantLimit() int64 {
	if w.cfg.TenantCap > 0 {
		return int64(w.cfg.TenantCap)
	}
	return int64(max(w.cfg.IngestWindow, 0)) + 1
}

// readTenants reads the tenants' counts when due (windowRecount after the
// last read): their jobs in flight and queued, each up to tenantLimit. A
// failed read keeps the last one.
func (w *Worker) readTenants(ctx context.Context) {
	if w.cfg.IngestWindow < 0 && w.cfg.TenantCap < 0 {
		return
	}
	now := w.cfg.Clock.Now().UnixNano()
	last := w.tenantsReadAt.Load()
	if now-last < int64(windowRecount) || !w.tenantsReadAt.CompareAndSwap(last, now) {
		return
	}
	ts, err := w.cfg.Store.QueueTenants(ctx, time.Time{})
	if err != nil {
		return
	}
	names, limits := make([]string, len(ts)), make([]int64, len(ts))
	for i, t := range ts {
		names[i], limits[i] = t.Tenant, w.tenantLimit()
	}
	counts, err := w.cfg.Store.CountQueued(ctx, names, limits)
	if err != nil {
		return
	}
	read, weight := make(map[string]int64, len(ts)), 0.0
	for i, t := range ts {
		read[t.Tenant] = counts[i] + t.InFlight
		weight += w.cfg.Tenants.Weight(t.Tenant)
	}
	w.tenants.set(read, weight)
}

// tenantAdmission decides, message by message, which of a batch's jobs
// their tenants' caps let in: pending counts the batch's jobs let in so
// far.
type tenantAdmission struct {
	w       *Worker
	pending map[string]int64
}

// admit reports whether j may be recorded, and counts it when it may.
func (a *tenantAdmission) admit(j *llmq.Job) bool {
	if a.w.cfg.TenantCap < 0 {
		return true
	}
	if a.w.tenants.value(j.Tenant)+a.pending[j.Tenant] >= int64(a.w.cfg.TenantCap) {
		return false
	}
	if a.pending == nil {
		a.pending = map[string]int64{}
	}
	a.pending[j.Tenant]++
	return true
}

// tenantFull is the dead letter of a message whose tenant holds its cap.
func (w *Worker) tenantFull(j *llmq.Job) dlq.Letter {
	return dlq.Letter{JobID: j.ID, Tenant: j.Tenant, Reason: dlq.ReasonTenantQueueFull,
		LastError: fmt.Sprintf("tenant %q holds %d jobs queued or in flight, its cap (ingest.tenant_cap %d)",
			j.Tenant, w.tenants.value(j.Tenant), w.cfg.TenantCap)}
}

// countRecorded counts the jobs of items that were created.
func (w *Worker) countRecorded(items []ingestItem, created []bool) {
	for i, it := range items {
		if created[i] {
			w.tenants.add(it.job.Job.Tenant, 1)
		}
	}
}
