package worker

import (
	"maps"
	"sync/atomic"

	"github.com/llmq/llmq"
)

// The models kept as data (docs/design/tenants.md#models-as-data): the app
// hands the worker each load of them (ModelsChanged); the lanes made so far
// move to their new limits in place, and everything that reads the catalog
// after reads them.

// liveModels are the models of the newest load; nil until the first (the
// configured catalog applies).
type liveModels struct {
	p atomic.Pointer[map[string]llmq.Model]
}

// ModelsChanged applies models, the models kept as data by name, at once:
// each lane made so far of a model without a key pool takes its model's
// rpm, tpm and concurrency (shaping.Lane.SetLimitsAt); the lanes made
// later, prices, context windows, fallbacks and the models a job may name
// read them from now on. The app calls it at every load of the tenancy
// that holds models.
func (w *Worker) ModelsChanged(models map[string]llmq.Model) {
	models = maps.Clone(models)
	w.live.p.Store(&models)
	now := w.cfg.Clock.Now()
	for _, l := range w.lanes.all() {
		if l.entry != "" {
			continue // a pool entry's limits are its own (pool.go)
		}
		m := w.lanes.model(l.model)
		if err := l.shaper.SetLimitsAt(now, m.RPM, m.TPM, m.Concurrency); err != nil {
			w.log.Warn("models: the new limits were not applied", "model", l.model, "error", err.Error())
		}
	}
}

// zeroCatalog is the catalog of a part given none: the zero Catalog.
func zeroCatalog() llmq.Catalog { return llmq.Catalog{} }

// catalog is the catalog the worker applies now: Config.Catalog with the
// models of the newest load in place of its own.
func (w *Worker) catalog() llmq.Catalog {
	cat := w.cfg.Catalog
	if m := w.live.p.Load(); m != nil {
		cat.Models = *m
	}
	return cat
}
