package console_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOverviewArrivals: the overview counts the jobs recorded and finished
// in the last hour as GET /v1/stats/arrivals does, for the key's tenant
// (an operator: every tenant's), in the live part too; with none it says
// what will appear.
func TestOverviewArrivals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	empty := b.browser(t)
	require.Equal(t, http.StatusSeeOther, empty.signIn(keyAcme).status)
	p := empty.get("/ui/")
	require.Contains(t, p.body, `No job recorded or finished in the last hour`)
	require.NotContains(t, p.body, `<svg class="chart rates"`)

	b.enqueue(t, keyAcme, "done")
	b.callTwice(t, "done")
	b.enqueue(t, keyAcme, "dropped")
	_, err := b.store.Jobs().Cancel(context.Background(), "acme", "dropped")
	require.NoError(t, err)
	b.enqueue(t, keyGlobex, "waiting")

	for _, c := range []struct {
		key                        string
		recorded, succeeded, other string
	}{{keyAcme, "2", "1", "1"}, {keyGlobex, "1", "0", "0"}, {keyOps, "3", "1", "1"}} {
		br := b.browser(t)
		require.Equal(t, http.StatusSeeOther, br.signIn(c.key).status)
		for _, path := range []string{"/ui/", "/ui/live/overview"} {
			p := br.get(path)
			require.Equal(t, http.StatusOK, p.status)
			require.Contains(t, p.body, `data-metric="arrivals-recorded">`+c.recorded+`</strong>`, "%s %s", c.key, path)
			require.Contains(t, p.body, `data-metric="arrivals-succeeded">`+c.succeeded+`</strong>`, "%s %s", c.key, path)
			require.Contains(t, p.body, `data-metric="arrivals-other-finished">`+c.other+`</strong>`, "%s %s", c.key, path)
			require.Contains(t, p.body, `<svg class="chart rates"`)
		}
	}
}
