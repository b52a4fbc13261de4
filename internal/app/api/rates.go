package api

import (
	"net/http"
	"time"

	"github.com/llmq/llmq/store"
)

// Arrivals is GET /v1/stats/arrivals: the jobs in scope recorded and
// finished per minute (schema Arrivals).
type Arrivals struct {
	// Since and Until bound the window: Since is the first minute shown,
	// Until the end of the last.
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Data has one entry per minute of the window, oldest first.
	Data []ArrivalMinute `json:"data"`
}

// ArrivalMinute is the jobs recorded and finished in one minute (schema
// ArrivalMinute).
type ArrivalMinute struct {
	Minute time.Time `json:"minute"`
	// Recorded counts the jobs recorded (created_at) in the minute.
	Recorded int64 `json:"recorded"`
	// Succeeded counts the jobs that finished succeeded in the minute;
	// OtherFinished those that reached another terminal status (failed,
	// dead_lettered, expired, cancelled).
	Succeeded     int64 `json:"succeeded"`
	OtherFinished int64 `json:"other_finished"`
}

// ArrivalsView is the window [since, now]'s jobs recorded and finished,
// with a point for every minute of it (none: zeros).
func ArrivalsView(minutes []store.JobMinute, since, now time.Time) Arrivals {
	first, last := since.UTC().Truncate(time.Minute), now.UTC().Truncate(time.Minute)
	byMinute := make(map[time.Time]store.JobMinute, len(minutes))
	for _, m := range minutes {
		byMinute[m.Minute] = m
	}
	out := Arrivals{Since: first, Until: last.Add(time.Minute), Data: []ArrivalMinute{}}
	for t := first; !t.After(last); t = t.Add(time.Minute) {
		m := byMinute[t]
		out.Data = append(out.Data, ArrivalMinute{Minute: t, Recorded: m.Recorded, Succeeded: m.Succeeded,
			OtherFinished: m.OtherFinished})
	}
	return out
}

// arrivals answers GET /v1/stats/arrivals?window=: the jobs in scope
// recorded and finished per minute over the window (default an hour).
func (sh *statsHandler) arrivals(w http.ResponseWriter, r *http.Request) {
	s, _ := scopeOf(r)
	now, since, ok := sh.statsWindow(w, r)
	if !ok {
		return
	}
	minutes, err := sh.store.JobRates(r.Context(), s.tenant, since)
	if err != nil {
		sh.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ArrivalsView(minutes, since, now))
}
