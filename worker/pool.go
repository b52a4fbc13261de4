package worker

import (
	"cmp"

	"github.com/llmq/llmq"
)

// Pools of upstream keys (docs/design/tenants.md, "Key pools"): a model of
// Config.Pools is served by several upstreams, each with a lane of its own.
// A job's call goes to the first entry whose lane has headroom now; when
// that entry is exhausted the job moves to another entry that serves the
// request and whose prices its budgets admit, before any fallback model
// (docs/design/tenants.md#key-pools-in-the-worker).

// PoolEntry is one upstream of a model's pool (Config.Pools).
type PoolEntry struct {
	// Name labels the entry in metrics, logs and the job's recorded calls
	// (never the key). Required, unique in its pool.
	Name string
	// Upstream makes the entry's calls (OpenAIUpstream over a client of
	// the entry's base URL and key). Required.
	Upstream Upstream
	// QuotaScope names the entry's provider and key for the quota ledger
	// (QuotaScopeOf); with the model it is the entry's ledger key.
	// Required with Config.Ledger.
	QuotaScope string
	// RPM, TPM and Concurrency are the entry's limits for the model,
	// which shape its lane; 0 = unknown (learnt from the headers, as for a
	// model without a pool).
	RPM, TPM    float64
	Concurrency int
	// ContextWindow is the model's context window at the entry; 0 = the
	// model's. A request it cannot hold never goes to the entry.
	ContextWindow int
	// InputPricePer1M and OutputPricePer1M are the entry's prices; 0 =
	// the model's. The job's budgets reserve and settle a call at the
	// prices of the entry that makes it.
	InputPricePer1M, OutputPricePer1M float64
}

// maxPoolEntries bounds a pool: the entries a job left are a bit set, and
// every entry is a metric label.
const maxPoolEntries = 16

// laneName is the key of the lane of model's entry ("" for a model
// without a pool) in laneSet.lanes.
func laneName(model, entry string) string {
	if entry == "" {
		return model
	}
	return model + "\x00" + entry
}

// model returns the catalog entry of a model, as its lane sees it.
func (ls *laneSet) model(name string) llmq.Model { return laneModel(ls.cfg.Catalog(), name) }

// pool is model's pool (nil for a model without one).
func (ls *laneSet) pool(model string) []PoolEntry { return ls.cfg.Pools[model] }

// unboundOf is the count of model's claimed jobs that have not chosen an
// entry of its pool yet, as a lane (only its pending count is used), so
// that they count against the model's headroom (the claim) but not
// against any entry's (the choice); nil for a model without a pool.
func (ls *laneSet) unboundOf(model string) *lane {
	if len(ls.pool(model)) < 2 {
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	u, ok := ls.unbound[model]
	if !ok {
		u = &lane{model: model}
		ls.unbound[model] = u
	}
	return u
}

// lanesOf returns the lanes of model: one per pool entry, or its one lane.
func (ls *laneSet) lanesOf(model string) []*lane {
	n := max(1, len(ls.pool(model)))
	lanes := make([]*lane, n)
	for i := range lanes {
		lanes[i] = ls.laneAt(model, i)
	}
	return lanes
}

// quotaKeys are the ledger keys of model's lanes, in entry order.
func (ls *laneSet) quotaKeys(model string) []string {
	pool := ls.pool(model)
	if len(pool) == 0 {
		return []string{ls.quotaKey(model)}
	}
	keys := make([]string, len(pool))
	for i, e := range pool {
		keys[i] = e.QuotaScope + " " + model
	}
	return keys
}

// priced is model's catalog entry with the prices of p's entry.
func (ls *laneSet) priced(p *job, model string) llmq.Model { return ls.pricedAt(model, p.entry) }

// pricedAt is model's catalog entry with the prices of its entry i.
func (ls *laneSet) pricedAt(model string, i int) llmq.Model {
	m := ls.model(model)
	if pool := ls.pool(model); i >= 0 && i < len(pool) {
		e := pool[i]
		m.InputPricePer1M = cmp.Or(e.InputPricePer1M, m.InputPricePer1M)
		m.OutputPricePer1M = cmp.Or(e.OutputPricePer1M, m.OutputPricePer1M)
	}
	return m
}

// entryName is the name of p's entry of model ("" without a pool).
func (ls *laneSet) entryName(p *job, model string) string {
	if pool := ls.pool(model); p.entry >= 0 && p.entry < len(pool) {
		return pool[p.entry].Name
	}
	return ""
}

// pickEntry is the entry of model p's next call goes to: the first, in
// the configured order, that serves the request and whose lane has
// headroom for it now (and, at prices other than the model's, whose
// budgets have room); else the first that serves it; else the first.
func (ls *laneSet) pickEntry(p *job, model string) int {
	pool := ls.pool(model)
	if len(pool) < 2 {
		return 0
	}
	first := -1
	for i := range pool {
		if !ls.serves(p, model, i) {
			continue
		}
		if first < 0 {
			first = i
		}
		base, at := ls.model(model), ls.pricedAt(model, i)
		samePrice := at.InputPricePer1M == base.InputPricePer1M && at.OutputPricePer1M == base.OutputPricePer1M
		if ls.hasHeadroom(p, model, i) && (samePrice || ls.budgetAllows(p, model, i)) {
			return i
		}
	}
	return max(0, first)
}

// nextEntry is 1 + the entry of model p may move to from the one it is on
// (0: none): the next in order, after p's, that p did not leave since its
// last call and that has capability (it serves the request), quota (its
// lane has headroom now) and budget (the job's budgets have room for the
// call at its prices).
func (ls *laneSet) nextEntry(p *job, model string) int {
	pool := ls.pool(model)
	if len(pool) < 2 || p.entry < 0 {
		return 0
	}
	for k := 1; k < len(pool); k++ {
		i := (p.entry + k) % len(pool)
		if p.left&(1<<i) != 0 {
			continue
		}
		if ls.serves(p, model, i) && ls.hasHeadroom(p, model, i) && ls.budgetAllows(p, model, i) {
			return i + 1
		}
	}
	return 0
}

// serves reports whether entry i of model holds p's request: its prompt
// and output allowance within the entry's context window.
func (ls *laneSet) serves(p *job, model string, i int) bool {
	win := ls.pool(model)[i].ContextWindow
	need := p.req.PromptTokens + cmp.Or(p.req.MaxOutputTokens, ls.model(model).MaxOutputDefault)
	return win <= 0 || need <= win
}

// hasHeadroom reports whether the lane of entry i of model could admit a
// typical request within FallbackMaxWait (the longest a job with
// somewhere else to go waits in a lane), past the jobs already bound for
// it but p: a lane paused by 429s, drained buckets or its concurrency
// taken have none.
func (ls *laneSet) hasHeadroom(p *job, model string, i int) bool {
	l := ls.laneAt(model, i)
	pending := int(l.pending.Load())
	p.pendingMu.Lock()
	if p.pendingIn == l {
		pending--
	}
	p.pendingMu.Unlock()
	typical := ls.lane(model).typical()
	return l.shaper.HeadroomAt(ls.cfg.Clock.Now(), ls.cfg.FallbackMaxWait, typical) > pending
}

// budgetAllows reports whether p's budgets have room for its call of
// model at the prices of entry i (budgetGate.allows).
func (ls *laneSet) budgetAllows(p *job, model string, i int) bool {
	return ls.cfg.BudgetAllows(p, ls.pricedAt(model, i).Cost(p.req.PromptTokens, p.req.MaxOutputTokens))
}
