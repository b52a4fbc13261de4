package api

import (
	"net/http"

	"github.com/llmq/llmq/store"
)

// jobStats counts the jobs in scope per status, each up to
// store.CountLimitDefault: GET /v1/stats/jobs.
func (a *API) jobStats(w http.ResponseWriter, r *http.Request) {
	s, _ := scopeOf(r)
	counts, err := a.cfg.Store.CountByStatus(r.Context(), s.tenant, store.CountLimitDefault)
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewJobCounts(s.tenant, counts, store.CountLimitDefault))
}
