package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDrainEstimate(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Duration(0), drainEstimate(0, 0))
	require.Equal(t, DrainUnknown, drainEstimate(10, 0))
	require.Equal(t, 100*time.Second, drainEstimate(1000, 10), "10 jobs/s")
	require.Equal(t, DrainUnknown, drainEstimate(1<<40, 1), "capped")
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	require.Equal(t, 100*time.Millisecond, retryDelay(0, time.Second))
	require.Equal(t, 800*time.Millisecond, retryDelay(3, time.Second))
	require.Equal(t, time.Second, retryDelay(4, time.Second))
	require.Equal(t, time.Second, retryDelay(100, time.Second))
}

// TestSetPendingMovesTokens: a job's pending count and tokens move
// together from lane to lane, what was added is what is taken back (the
// job's estimate may change meanwhile), and its scopes count it once.
func TestSetPendingMovesTokens(t *testing.T) {
	t.Parallel()
	a, b := &lane{model: "a"}, &lane{model: "b"}
	sc := &scopeQuota{}
	p := &job{tokens: 100, scopes: []*scopeQuota{sc}}
	p.setPending(a)
	require.Equal(t, [4]int64{1, 100, 0, 0}, [4]int64{a.pending.Load(), a.pendingTokens.Load(), b.pending.Load(), b.pendingTokens.Load()})
	p.tokens = 120 // prepared: its admission request
	p.setPending(a)
	require.Equal(t, int64(100), a.pendingTokens.Load(), "unchanged in the same lane")
	p.setPending(b)
	require.Equal(t, [4]int64{0, 0, 1, 120}, [4]int64{a.pending.Load(), a.pendingTokens.Load(), b.pending.Load(), b.pendingTokens.Load()})
	require.Equal(t, int64(1), sc.pending.Load())
	p.setPending(nil)
	require.Equal(t, [4]int64{0, 0, 0, 0}, [4]int64{a.pending.Load(), a.pendingTokens.Load(), b.pending.Load(), b.pendingTokens.Load()})
	require.Zero(t, sc.pending.Load())
}
