package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestArrivals: GET /v1/stats/arrivals counts the jobs in scope recorded
// and finished per minute, a point for every minute of the window, a
// cancelled job apart from the succeeded ones.
func TestArrivals(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})      // 12:00:00
	b.callTwice(t, keyAcme, "a1") // recorded 12:00:00, succeeded 12:00:04
	require.Equal(t, http.StatusAccepted, b.post(t, keyGlobex, `{"id":"g1","body":`+validBody+`}`).status)
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, `{"id":"a2","body":`+validBody+`}`).status)
	b.clock.Advance(66 * time.Second) // 12:01:10
	require.Equal(t, http.StatusOK, b.do(t, http.MethodDelete, "/v1/jobs/a2", keyAcme, "", nil).status)
	require.Equal(t, http.StatusAccepted, b.post(t, keyAcme, `{"id":"a3","body":`+validBody+`}`).status)
	b.clock.Advance(80 * time.Second) // 12:02:30

	window := func(m00, m01 string) string {
		return `{"since":"2026-11-30T11:59:00Z","until":"2026-11-30T12:03:00Z","data":[
			{"minute":"2026-11-30T11:59:00Z","recorded":0,"succeeded":0,"other_finished":0},
			{"minute":"2026-11-30T12:00:00Z",` + m00 + `},
			{"minute":"2026-11-30T12:01:00Z",` + m01 + `},
			{"minute":"2026-11-30T12:02:00Z","recorded":0,"succeeded":0,"other_finished":0}]}`
	}
	for _, c := range []struct{ key, path, want string }{
		{keyAcme, "/v1/stats/arrivals?window=3m", window(`"recorded":2,"succeeded":1,"other_finished":0`,
			`"recorded":1,"succeeded":0,"other_finished":1`)},
		{keyOps, "/v1/stats/arrivals?window=3m", window(`"recorded":3,"succeeded":1,"other_finished":0`,
			`"recorded":1,"succeeded":0,"other_finished":1`)},
		{keyOps, "/v1/stats/arrivals?window=3m&tenant=globex", window(`"recorded":1,"succeeded":0,"other_finished":0`,
			`"recorded":0,"succeeded":0,"other_finished":0`)},
		{keyGlobex, "/v1/stats/arrivals?window=3m", window(`"recorded":1,"succeeded":0,"other_finished":0`,
			`"recorded":0,"succeeded":0,"other_finished":0`)},
	} {
		r := b.get(t, c.key, c.path)
		require.Equal(t, http.StatusOK, r.status, c.path)
		require.JSONEq(t, c.want, string(r.body), "%s as %s", c.path, c.key)
	}

	r := b.get(t, keyAcme, "/v1/stats/arrivals")
	require.Equal(t, http.StatusOK, r.status)
	require.Len(t, r.json(t)["data"], 61, "an hour by default, the current minute included")

	for _, bad := range []string{"0s", "30s", "25h", "soon"} {
		r = b.get(t, keyAcme, "/v1/stats/arrivals?window="+bad)
		require.Equal(t, http.StatusBadRequest, r.status, bad)
		require.Equal(t, "window", r.json(t)["error"].(map[string]any)["field"])
	}
}
