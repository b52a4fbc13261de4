package llmq_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
)

// legal is the lifecycle of docs/design/queue-of-record.md (job states)
// written out pair by pair, independently of
// the table in status.go.
var legal = map[[2]llmq.Status]bool{
	{llmq.StatusQueued, llmq.StatusRunning}:        true, // a worker claims it
	{llmq.StatusQueued, llmq.StatusBatched}:        true, // moved into a provider batch
	{llmq.StatusQueued, llmq.StatusExpired}:        true, // deadline passed before start
	{llmq.StatusQueued, llmq.StatusCancelled}:      true, // DELETE /v1/jobs/{id}
	{llmq.StatusQueued, llmq.StatusDeadLettered}:   true, // its message dead-lettered before a claim
	{llmq.StatusQueued, llmq.StatusSucceeded}:      true, // the late result of a holder whose lease was reaped
	{llmq.StatusRunning, llmq.StatusRunning}:       true, // the holder begins a call
	{llmq.StatusRunning, llmq.StatusSucceeded}:     true,
	{llmq.StatusRunning, llmq.StatusRetrying}:      true,
	{llmq.StatusRunning, llmq.StatusFailed}:        true,
	{llmq.StatusRunning, llmq.StatusDeadLettered}:  true,
	{llmq.StatusRunning, llmq.StatusExpired}:       true, // deadline found passed after the claim
	{llmq.StatusRunning, llmq.StatusQueued}:        true, // handed back (shutdown) or reaped (lease expired)
	{llmq.StatusRetrying, llmq.StatusRunning}:      true,
	{llmq.StatusRetrying, llmq.StatusDeadLettered}: true,
	{llmq.StatusRetrying, llmq.StatusExpired}:      true,
	{llmq.StatusRetrying, llmq.StatusFailed}:       true,
	{llmq.StatusRetrying, llmq.StatusQueued}:       true, // graceful shutdown during backoff
	{llmq.StatusRetrying, llmq.StatusSucceeded}:    true, // a late result of an earlier holder
	{llmq.StatusBatched, llmq.StatusSucceeded}:     true,
	{llmq.StatusBatched, llmq.StatusDeadLettered}:  true,
	{llmq.StatusBatched, llmq.StatusQueued}:        true, // batch failed/expired: back to the live lane
}

func TestCanTransitionEveryPair(t *testing.T) {
	t.Parallel()
	require.Len(t, llmq.Statuses, 9)
	n := 0
	for _, from := range llmq.Statuses {
		for _, to := range llmq.Statuses {
			n++
			require.Equal(t, legal[[2]llmq.Status{from, to}], llmq.CanTransition(from, to), "%s → %s", from, to)
		}
		require.ElementsMatch(t, outgoing(from), llmq.TransitionsFrom(from), from)
	}
	require.Equal(t, 81, n)
	require.False(t, llmq.CanTransition("bogus", llmq.StatusRunning))
	require.False(t, llmq.CanTransition(llmq.StatusQueued, "bogus"))
}

func outgoing(from llmq.Status) []llmq.Status {
	var out []llmq.Status
	for pair := range legal {
		if pair[0] == from {
			out = append(out, pair[1])
		}
	}
	return out
}

func TestTerminalStatesAreNeverLeft(t *testing.T) {
	t.Parallel()
	terminal := map[llmq.Status]bool{
		llmq.StatusSucceeded: true, llmq.StatusFailed: true, llmq.StatusDeadLettered: true,
		llmq.StatusExpired: true, llmq.StatusCancelled: true,
	}
	for _, s := range llmq.Statuses {
		require.True(t, s.Valid())
		require.Equal(t, terminal[s], s.Terminal(), s)
		if s.Terminal() {
			require.Empty(t, llmq.TransitionsFrom(s), s)
		}
	}
	require.False(t, llmq.Status("done").Valid())
	// TransitionsFrom returns a copy.
	ts := llmq.TransitionsFrom(llmq.StatusQueued)
	ts[0] = llmq.StatusFailed
	require.False(t, llmq.CanTransition(llmq.StatusQueued, llmq.StatusFailed))
}

// TestLeasedStatuses: a worker's lease holds a job exactly while it runs or
// waits out a backoff.
func TestLeasedStatuses(t *testing.T) {
	t.Parallel()
	leased := map[llmq.Status]bool{llmq.StatusRunning: true, llmq.StatusRetrying: true}
	for _, s := range llmq.Statuses {
		require.Equal(t, leased[s], s.Leased(), s)
	}
}
