package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPredictionLanes: the lanes' rows sum to the model's rates and
// concurrency; a lane in its slow start (concurrency 0) makes the model's
// concurrency unknown, and the prediction a floor that counts no wait for
// a slot, not a wait at the other lanes' slots alone.
func TestPredictionLanes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		lanes    []LaneRate
		known    bool
		conc     int64
		latency  time.Duration
		wait     time.Duration
		inFlight int64
	}{
		{"none", nil, false, 0, 0, 0, 0},
		{"a concurrency alone", []LaneRate{{Concurrency: 4, Latency: time.Second}}, false, 4, time.Second, 0, 0},
		// 20 ahead and 4 in flight, 4 at a time: (20+4+1-4)/4 s, then the call's 1 s.
		{"two lanes", []LaneRate{{RequestsPerMin: 150, Concurrency: 2, Latency: 500 * time.Millisecond},
			{RequestsPerMin: 150, Concurrency: 2, Latency: 1500 * time.Millisecond}}, true, 4, time.Second, 6250 * time.Millisecond, 4},
		// One lane grows its concurrency: the floor, the call's 1 s.
		{"a slow start", []LaneRate{{RequestsPerMin: 150, Concurrency: 2, Latency: time.Second},
			{RequestsPerMin: 150, Latency: time.Second}}, true, 0, time.Second, time.Second, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := Prediction{Ahead: 20, AheadTokens: 800}
			p.addLanes(tc.lanes)
			require.Equal(t, tc.known, p.Known)
			require.Equal(t, tc.conc, p.Concurrency)
			require.Equal(t, tc.latency, p.Latency)
			if !tc.known {
				return
			}
			p.InFlight = tc.inFlight
			require.Equal(t, 300.0, p.RequestsPerMin)
			require.Equal(t, tc.wait, p.predict(40))
		})
	}
}

// TestPredictionLearn: a job's latency and llmq's overhead are the
// medians of the recent jobs', the overhead without their wait in the
// lane: a job retried after a backoff, and jobs that waited behind a burst
// (which the slot wait counts), do not lengthen the next call's. The calls
// ahead hold their slots the lanes' call latency.
func TestPredictionLearn(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	job := func(overhead, laneWait, service time.Duration) recentJob {
		started := t0.Add(overhead + laneWait)
		return recentJob{created: t0, started: started, finished: started.Add(service), laneWait: laneWait}
	}
	ms := time.Millisecond
	recent := []recentJob{
		job(100*ms, 0, 400*ms),
		job(120*ms, 2*time.Second, 420*ms),
		job(90*ms, 3*time.Second, 380*ms),
		job(110*ms, 1*time.Second, 9*time.Second), // retried after a backoff
		job(100*ms, 4*time.Second, 400*ms),
	}
	p := Prediction{Concurrency: 4, RequestsPerMin: 300, Latency: time.Second}
	p.learn(recent)
	require.Equal(t, 400*ms, p.Latency)
	require.Equal(t, 100*ms, p.Overhead)
	// Nothing ahead: the call's latency and the overhead.
	require.Equal(t, 500*ms, p.predict(40))
	// 8 ahead and 4 in flight, 4 at a time, each holding its slot the
	// lanes' call latency (0.3 s, not a job's 0.4 s): (8+4+1-4)/4 x 0.3 s,
	// then the call's 0.4 s and the overhead.
	p.Ahead, p.InFlight, p.CallLatency = 8, 4, 300*ms
	require.Equal(t, 1175*ms, p.predict(40))

	// No recent job: the lanes' latency stays, no overhead.
	p = Prediction{Latency: time.Second}
	p.learn(nil)
	require.Equal(t, time.Second, p.Latency)
	require.Zero(t, p.Overhead)
}
