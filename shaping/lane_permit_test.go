package shaping

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func TestPermitSpentCopies(t *testing.T) {
	t.Parallel()
	lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 60, TPM: 1e6, WarmUp: -1, MinInterval: -1, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	ctx := context.Background()

	p, err := lane.Admit(ctx, Request{PromptTokens: 10, MaxOutputTokens: 10})
	require.NoError(t, err)
	q := p
	require.NoError(t, p.Done(Outcome{}))
	require.ErrorIs(t, q.Done(Outcome{}), ErrPermitDone, "a copy is spent with the original")
	q.Cancel()
	require.Equal(t, 0, lane.Snapshot().InFlight)

	// Later permits may reuse the record: the stale copies still cannot
	// touch them.
	for range 10 {
		p2, err := lane.Admit(ctx, Request{PromptTokens: 10, MaxOutputTokens: 10})
		require.NoError(t, err)
		require.ErrorIs(t, p.Done(Outcome{}), ErrPermitDone)
		q.Cancel()
		require.Equal(t, 1, lane.Snapshot().InFlight)
		p2.Cancel()
		require.Equal(t, 0, lane.Snapshot().InFlight)
	}
	s := lane.Snapshot()
	require.InDelta(t, 59, s.Buckets[0].Level, 1e-9, "only the settled permit keeps its request")
	require.InDelta(t, 1e6-20, s.Buckets[1].Level, 1e-9)

	var zero Permit
	require.ErrorIs(t, zero.Done(Outcome{}), ErrPermitDone)
	zero.Cancel()
}

// recordingController keeps the samples it is fed; its limit stays 4.
type recordingController struct{ samples []Sample }

func (c *recordingController) Update(s Sample) int { c.samples = append(c.samples, s); return 4 }
func (c *recordingController) Tick(time.Time) int  { return 4 }
func (c *recordingController) Limit() int          { return 4 }

// TestPermitDoneFeedsController: each Done feeds one sample: the latency
// given, or measured from the send; the usage; the in-flight count at the
// send; a 429 or an overload as a drop.
func TestPermitDoneFeedsController(t *testing.T) {
	t.Parallel()
	ctrl := &recordingController{}
	lane, err := NewLane(LaneConfig{Strategy: StrategyAdaptive, RPM: 600, TPM: 1e6, WarmUp: -1, MinInterval: -1, Controller: ctrl, Clock: clockwork.NewFakeClockAt(t0)})
	require.NoError(t, err)
	send := func(at time.Time) *Permit {
		r, err := lane.ReserveAt(at, Request{PromptTokens: 10, MaxOutputTokens: 10})
		require.NoError(t, err)
		require.True(t, lane.TryAcquireSlot())
		return lane.SendAt(at, r)
	}
	p1, p2 := send(t0), send(sec(1))
	require.NoError(t, p2.DoneAt(sec(3), Outcome{PromptTokens: 10, CompletionTokens: 4}))
	require.NoError(t, p1.DoneAt(sec(4), Outcome{Latency: 500 * time.Millisecond, RateLimited: true}))
	p3 := send(sec(5))
	require.NoError(t, p3.DoneAt(sec(6), Outcome{Latency: -time.Second, Overloaded: true}))
	require.Equal(t, []Sample{
		{At: sec(3), Latency: 2 * time.Second, Tokens: 14, OutputTokens: 4, InFlight: 2},
		{At: sec(4), Latency: 500 * time.Millisecond, InFlight: 1, Dropped: true},
		{At: sec(6), Latency: time.Second, InFlight: 1, Dropped: true},
	}, ctrl.samples)
	require.Equal(t, 0, lane.SnapshotAt(sec(6)).InFlight)
}

// TestPermitSettlement: Done settles the TPM reservation to the real usage,
// unless the usage is unknown, the request was rate limited, or the lane
// keeps reservations (SettleReserved); the RPM request always stays.
func TestPermitSettlement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		settle   Settlement
		o        Outcome
		tpmLevel float64
	}{
		{"actual: unused output back", SettleActual, Outcome{PromptTokens: 100, CompletionTokens: 20}, 1000 - 120},
		{"actual: an overrun is taken", SettleActual, Outcome{PromptTokens: 100, CompletionTokens: 300}, 1000 - 400},
		{"actual: unknown usage keeps the reservation", SettleActual, Outcome{}, 1000 - 300},
		{"actual: a 429 keeps the reservation", SettleActual, Outcome{PromptTokens: 100, CompletionTokens: 20, RateLimited: true}, 1000 - 300},
		{"reserved: kept", SettleReserved, Outcome{PromptTokens: 100, CompletionTokens: 20}, 1000 - 300},
	} {
		lane, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 60, TPM: 1000, WarmUp: -1, MinInterval: -1, Settlement: tc.settle, Clock: clockwork.NewFakeClockAt(t0)})
		require.NoError(t, err)
		r, err := lane.ReserveAt(t0, Request{PromptTokens: 100, MaxOutputTokens: 200})
		require.NoError(t, err)
		p := lane.SendAt(t0, r)
		require.Equal(t, 300, p.Tokens())
		require.Equal(t, t0, p.SentAt())
		require.NoError(t, p.DoneAt(t0, tc.o))
		s := lane.SnapshotAt(t0)
		require.Equal(t, []float64{59, tc.tpmLevel}, []float64{s.Buckets[0].Level, s.Buckets[1].Level}, tc.name)
		require.Equal(t, uint64(1), s.Admitted)
	}
}
