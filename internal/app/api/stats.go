package api

import (
	"context"
	"net/http"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// statsStore is what the statistics endpoints read.
type statsStore interface {
	CountByStatus(ctx context.Context, tenant string, limit int64) (map[llmq.Status]int64, error)
	ModelStats(ctx context.Context, tenant string, since time.Time) ([]store.ModelCalls, error)
	JobRates(ctx context.Context, tenant string, since time.Time) ([]store.JobMinute, error)
}

// statsHandler serves the statistics under /v1/stats: jobs per status,
// calls per model and minute, arrivals per minute.
type statsHandler struct {
	replies
	store statsStore
	clock clockwork.Clock
	// catalog is the catalog applied now (API.catalog).
	catalog func() llmq.Catalog
}

// jobStats counts the jobs in scope per status, each up to
// store.CountLimitDefault: GET /v1/stats/jobs.
func (sh *statsHandler) jobStats(w http.ResponseWriter, r *http.Request) {
	s, _ := scopeOf(r)
	counts, err := sh.store.CountByStatus(r.Context(), s.tenant, store.CountLimitDefault)
	if err != nil {
		sh.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewJobCounts(s.tenant, counts, store.CountLimitDefault))
}
