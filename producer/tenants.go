package producer

import (
	"context"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// TenantQueue is one tenant's part of the queue: its depth, its share of
// the queue's capacity and its drain estimate (docs/design/admission.md).
type TenantQueue struct {
	Tenant string
	// Depth is the tenant's jobs queued in Postgres, counted up to
	// HardShare, plus its jobs in flight and those this producer recorded
	// for it since the measurement.
	Depth int64
	// Queued and InFlight are the measured parts of Depth.
	Queued   int64
	InFlight int64
	// Weight is the tenant's weight (llmq.Tenants.Weight).
	Weight float64
	// SoftShare and HardShare are the depths from which the tenant is
	// throttled, then refused: its llmq.Tenant SoftDepth and HardDepth, or
	// llmq.ShareOf its weight among the tenants holding jobs times the
	// queue's SoftDepth and HardDepth.
	SoftShare int64
	HardShare int64
	// CompletionRatePerMin is the rate the tenant's jobs drain at: its own
	// jobs finished per minute over the rate window, and at least its share
	// of the queue's rate.
	CompletionRatePerMin float64
	// EstimatedDrain is Depth at CompletionRatePerMin; DrainKnown is false
	// when no rate is known or no worker consumes.
	EstimatedDrain time.Duration
	DrainKnown     bool
	// State is the tenant's state: StateRejecting when it holds HardShare
	// or the queue its HardDepth, StateNoConsumer as the queue's,
	// StateThrottled from SoftShare, else StateOK.
	State State
}

// tenantTable is the tenants' part of one measurement.
type tenantTable struct {
	// byName are the tenants holding jobs, with their queued jobs counted.
	byName map[string]store.TenantQueue
	// weight is the sum of their weights.
	weight float64
	// drainRate is the queue's rate of the drain estimate (the quotas'
	// on a cold start).
	drainRate float64
	// projects are the jobs queued or in flight of the projects with
	// depths of their own, of the tenants holding jobs.
	projects map[store.ScopeRef]int64
}

// measureTenants finds the tenants holding jobs and counts each one's
// queued jobs up to its hard share.
func (p *Producer) measureTenants(ctx context.Context, since time.Time) (*tenantTable, error) {
	ts, err := p.cfg.Store.QueueTenants(ctx, since)
	if err != nil {
		return nil, err
	}
	t := &tenantTable{byName: make(map[string]store.TenantQueue, len(ts))}
	for _, q := range ts {
		t.weight += p.tenants().Weight(q.Tenant)
		t.byName[q.Tenant] = q
	}
	names, limits := make([]string, len(ts)), make([]int64, len(ts))
	for i, q := range ts {
		names[i] = q.Tenant
		_, limits[i] = p.shares(t, q.Tenant)
	}
	counts, err := p.cfg.Store.CountQueued(ctx, names, limits)
	if err != nil {
		return nil, err
	}
	for i, q := range ts {
		q.Queued = counts[i]
		t.byName[q.Tenant] = q
	}
	t.projects = map[store.ScopeRef]int64{}
	for i, q := range ts {
		projects := limitedProjects(p.tenants()[q.Tenant])
		if len(projects) == 0 {
			continue
		}
		n, err := p.cfg.Store.CountProjects(ctx, q.Tenant, projects, limits[i])
		if err != nil {
			return nil, err
		}
		for j, name := range projects {
			t.projects[store.ScopeRef{Tenant: q.Tenant, Project: name}] = n[j]
		}
	}
	return t, nil
}

// limitedProjects are the projects of t with depths of their own, by name.
func limitedProjects(t llmq.Tenant) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(t.Projects)) {
		if pr := t.Projects[name]; pr.SoftDepth > 0 || pr.HardDepth > 0 {
			out = append(out, name)
		}
	}
	return out
}

// shares returns tenant's soft and hard shares under t.
func (p *Producer) shares(t *tenantTable, tenant string) (soft, hard int64) {
	w := p.tenants().Weight(tenant)
	total := t.weight
	if _, ok := t.byName[tenant]; !ok {
		total += w
	}
	frac := llmq.ShareOf(w, total)
	cfg := p.tenants()[tenant]
	soft = cfg.SoftDepth
	if soft == 0 {
		soft = max(int64(math.Ceil(frac*float64(p.cfg.SoftDepth))), 1)
	}
	hard = cfg.HardDepth
	if hard == 0 {
		hard = int64(math.Ceil(frac * float64(p.cfg.HardDepth)))
	}
	return soft, max(hard, soft+1)
}

// tenantQueue is tenant's part of q, measured with t, with the jobs
// recorded for it since.
func (p *Producer) tenantQueue(q QueueState, t *tenantTable, tenant string, recorded int64) *TenantQueue {
	m := t.byName[tenant]
	tq := &TenantQueue{Tenant: tenant, Queued: m.Queued, InFlight: m.InFlight, Weight: p.tenants().Weight(tenant)}
	tq.SoftShare, tq.HardShare = p.shares(t, tenant)
	tq.Depth = m.Queued + m.InFlight + recorded
	total := t.weight
	if _, ok := t.byName[tenant]; !ok {
		total += tq.Weight
	}
	// Claimed by fair share, a backlogged tenant drains at its weight's
	// part of the queue's rate at least (ShareOf is a floor of it).
	tq.CompletionRatePerMin = max(float64(m.Finished)/p.cfg.RateWindow.Minutes(),
		t.drainRate*llmq.ShareOf(tq.Weight, total))
	tq.EstimatedDrain, tq.DrainKnown = QueueState{CompletionRatePerMin: tq.CompletionRatePerMin}.waitFor(tq.Depth)
	switch {
	case q.State == StateRejecting || tq.Depth >= tq.HardShare:
		tq.State = StateRejecting
	case q.State == StateNoConsumer:
		tq.State = StateNoConsumer
	case tq.Depth >= tq.SoftShare:
		tq.State = StateThrottled
	default:
		tq.State = StateOK
	}
	if q.State == StateNoConsumer {
		tq.EstimatedDrain, tq.DrainKnown = 0, false
	}
	return tq
}

// tenantView is q with tenant's part, under the latest measurement of the
// tenants.
func (p *Producer) tenantView(q QueueState, tenant string) QueueState {
	p.mu.Lock()
	t, recorded := p.table, p.recorded[tenant]
	p.mu.Unlock()
	if t == nil {
		t = &tenantTable{}
	}
	q.Tenant = p.tenantQueue(q, t, tenant, recorded)
	return q
}

// countRecorded adds a job recorded for j's tenant and project to their
// depths until the next measurement.
func (p *Producer) countRecorded(j *llmq.Job) {
	p.mu.Lock()
	p.recorded[j.Tenant]++
	if j.Project != "" {
		p.recordedProjects[store.ScopeRef{Tenant: j.Tenant, Project: j.Project}]++
	}
	p.mu.Unlock()
}

// projectDepth is the jobs of j's project queued or in flight, and its
// configured depths (0 when it has none of its own).
func (p *Producer) projectDepth(j *llmq.Job) (depth, soft, hard int64) {
	cfg := p.tenants()[j.Tenant].Projects[j.Project]
	if j.Project == "" || cfg.SoftDepth == 0 && cfg.HardDepth == 0 {
		return 0, 0, 0
	}
	ref := store.ScopeRef{Tenant: j.Tenant, Project: j.Project}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.table != nil {
		depth = p.table.projects[ref]
	}
	return depth + p.recordedProjects[ref], cfg.SoftDepth, cfg.HardDepth
}

// QueueOf returns the queue's state with tenant's part (QueueState.Tenant),
// measured at most DepthTTL ago.
func (p *Producer) QueueOf(ctx context.Context, tenant string) (QueueState, error) {
	q, err := p.Queue(ctx)
	if err != nil {
		return q, err
	}
	return p.tenantView(q, tenant), nil
}

// Tenants returns the queue's state and the part of each tenant holding
// jobs, by name, measured at most DepthTTL ago.
func (p *Producer) Tenants(ctx context.Context) (QueueState, []TenantQueue, error) {
	q, err := p.Queue(ctx)
	if err != nil {
		return q, nil, err
	}
	p.mu.Lock()
	t := p.table
	p.mu.Unlock()
	if t == nil {
		return q, []TenantQueue{}, nil
	}
	out := make([]TenantQueue, 0, len(t.byName))
	for _, name := range slices.Sorted(maps.Keys(t.byName)) {
		out = append(out, *p.tenantView(q, name).Tenant)
	}
	return q, out, nil
}

// admitTenants refuses jobs whose tenant holds its hard share, or whose
// project its hard depth, and returns q with the first job's tenant's part
// (throttled when the first job's project holds its soft depth).
func (p *Producer) admitTenants(q QueueState, jobs []*llmq.Job) (QueueState, *ErrBackpressure) {
	var first QueueState
	seen := make(map[store.ScopeRef]bool, 1)
	for i, j := range jobs {
		ref := store.ScopeRef{Tenant: j.Tenant, Project: j.Project}
		if seen[ref] {
			continue
		}
		seen[ref] = true
		tq := p.tenantView(q, j.Tenant)
		depth, soft, hard := p.projectDepth(j)
		if i == 0 {
			first = tq
			if soft > 0 && depth >= soft && tq.Tenant.State == StateOK {
				first.Tenant.State = StateThrottled
			}
		}
		if q.State != StateRejecting && hard > 0 && depth >= hard {
			wait, known := QueueState{CompletionRatePerMin: tq.Tenant.CompletionRatePerMin}.waitFor(depth - soft)
			return tq, &ErrBackpressure{Reason: ReasonTenantQueueFull, RetryAfter: retryHint(wait, known), Queue: tq,
				Index: i, Tenant: j.Tenant, Project: j.Project, ProjectDepth: depth}
		}
		if q.State != StateRejecting && tq.Tenant.Depth >= tq.Tenant.HardShare {
			t := tq.Tenant
			wait, known := QueueState{CompletionRatePerMin: t.CompletionRatePerMin}.waitFor(t.Depth - t.SoftShare)
			return tq, &ErrBackpressure{Reason: ReasonTenantQueueFull, RetryAfter: retryHint(wait, known), Queue: tq,
				Index: -1, Tenant: j.Tenant}
		}
	}
	return first, nil
}

// tenants are the tenants the producer applies now: LiveTenants', else
// Config.Tenants.
func (p *Producer) tenants() llmq.Tenants {
	if p.cfg.LiveTenants != nil {
		return p.cfg.LiveTenants()
	}
	return p.cfg.Tenants
}
