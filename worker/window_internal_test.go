package worker

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// windowStore answers the ingest window's reads with min(queued, limit),
// records the limits asked, and runs during (when set) while a read is in
// flight.
type windowStore struct {
	JobStore
	queued int64
	limits []int64
	during func()
}

func (s *windowStore) QueuedCount(_ context.Context, limit int64) (int64, error) {
	s.limits = append(s.limits, limit)
	if s.during != nil {
		s.during()
	}
	return min(s.queued, limit), nil
}

// TestWindowCount: the ingest window's count is read every windowRecount,
// up to the window and its slack, and follows the worker's records and
// claims in between, including those made while a read is in flight; a
// read that reaches its limit (a backlog recorded by another path) is a
// floor the claims do not lower, read again every windowRefresh up to the
// window only, until it falls under it.
func TestWindowCount(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	st := &windowStore{queued: 10}
	in := &ingester{cfg: ingesterConfig{Window: 10, Clock: clock, Store: st}}
	ctx := context.Background()

	// While the first read is in flight: a claim of 3, which it counted,
	// and a record of 2, which it missed: the count is short by both.
	st.during = func() { st.queued -= 3; in.window.add(0, 3); in.window.add(2, 0) }
	in.readWindow(ctx)
	st.during = nil
	require.Equal(t, []int64{15}, st.limits, "the window and half of it again")
	require.Equal(t, int64(4), in.window.value(), "short by what was recorded and claimed during the read")
	in.window.add(2, 0)
	in.window.add(0, 3)
	require.Equal(t, int64(3), in.window.value(), "an exact count follows records and claims")
	clock.Advance(windowRecount - time.Millisecond)
	in.readWindow(ctx)
	require.Len(t, st.limits, 1, "not read again before windowRecount")
	clock.Advance(time.Millisecond)
	st.queued = 40
	in.readWindow(ctx)
	require.Equal(t, []int64{15, 15}, st.limits)
	require.Equal(t, int64(15), in.window.value())
	in.window.add(1, 9)
	require.Equal(t, int64(16), in.window.value(), "a count at its limit is a floor: records count, claims do not")
	clock.Advance(windowRefresh)
	st.queued = 12
	in.readWindow(ctx)
	require.Equal(t, []int64{15, 15, 10}, st.limits, "over the window: read every windowRefresh, up to the window")
	require.Equal(t, int64(10), in.window.value())
	clock.Advance(windowRefresh)
	st.queued = 9
	in.readWindow(ctx)
	require.Equal(t, []int64{15, 15, 10, 10}, st.limits)
	in.window.add(0, 2)
	require.Equal(t, int64(7), in.window.value(), "under the window again: exact")
	clock.Advance(windowRefresh)
	in.readWindow(ctx)
	require.Len(t, st.limits, 4, "back to windowRecount")
}
