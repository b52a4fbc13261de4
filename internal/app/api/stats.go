package api

import "net/http"

// jobStats counts the jobs in scope per status: GET /v1/stats/jobs.
func (a *API) jobStats(w http.ResponseWriter, r *http.Request) {
	s, _ := scopeOf(r)
	counts, err := a.cfg.Store.CountByStatus(r.Context(), s.tenant)
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewJobCounts(s.tenant, counts))
}
