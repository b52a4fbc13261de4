package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
)

// ledgerFake records the claims written and answers with rows (the
// claims as rows of replica "me" when rows is nil), or err.
type ledgerFake struct {
	mu     sync.Mutex
	rows   []store.LedgerEntry
	err    error
	claims [][]store.QuotaClaim
	left   []string
}

func (f *ledgerFake) RenewQuotas(_ context.Context, replica string, _ time.Duration, claims []store.QuotaClaim) ([]store.LedgerEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims = append(f.claims, claims)
	if f.err != nil {
		return nil, f.err
	}
	return f.rows, nil
}

func (f *ledgerFake) LeaveQuotas(_ context.Context, replica string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = append(f.left, replica)
	return nil
}

// quotaList is a quotaLister of fixed quotas.
type quotaList []ledgerLane

func (q quotaList) ledgerLanes() []ledgerLane { return q }

func newTestLedger(t *testing.T, l *ledgerFake, quotas quotaList, clock clockwork.Clock) *ledgerSync {
	t.Helper()
	s, err := newLedgerSync(ledgerSyncConfig{Ledger: l, Quotas: quotas, Replica: "me", Clock: clock,
		Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return s
}

// TestLedgerRound: a round writes every quota, one not started on the
// floor without demand; it computes each quota's share from its own rows
// (this replica's marked Self), remembers it for the lanes started later,
// and keeps the shares when the ledger cannot be written.
func TestLedgerRound(t *testing.T) {
	t.Parallel()
	l := &ledgerFake{rows: []store.LedgerEntry{
		{Key: "alone", Replica: "me", Share: 0.5},
		{Key: "shared", Replica: "me", Share: 0.5, Demand: 1},
		{Key: "shared", Replica: "other", Share: 0.5, Demand: 3},
	}}
	s := newTestLedger(t, l, quotaList{{key: "alone"}, {key: "shared"}}, clockwork.NewFakeClock())
	s.prime(context.Background())
	require.Equal(t, [][]store.QuotaClaim{{{Key: "alone", Share: shaping.ShareFloorDefault},
		{Key: "shared", Share: shaping.ShareFloorDefault}}}, l.claims)
	want := shaping.ReplicaShare([]shaping.Replica{{Name: "me", Share: 0.5, Demand: 1, Self: true},
		{Name: "other", Share: 0.5, Demand: 3}}, shaping.ShareFloorDefault)
	require.Less(t, want, 0.5)
	require.Equal(t, 1.0, s.startShare(context.Background(), "alone"))
	require.Equal(t, want, s.startShare(context.Background(), "shared"))
	require.Len(t, l.claims, 1, "a remembered share is not read again")

	l.err = errors.New("database down")
	s.round(context.Background())
	require.Equal(t, []store.QuotaClaim{{Key: "alone", Share: 1}, {Key: "shared", Share: want}}, l.claims[1])
	require.Equal(t, want, s.startShare(context.Background(), "shared"), "the shares are kept")
}

// TestLedgerStartShare: a quota the ledger has not seen is read at once,
// declaring a backlog; a ledger that cannot be read starts it on the floor.
func TestLedgerStartShare(t *testing.T) {
	t.Parallel()
	l := &ledgerFake{rows: []store.LedgerEntry{{Key: "new", Replica: "me", Share: 0.5}}}
	s := newTestLedger(t, l, nil, clockwork.NewFakeClock())
	require.Equal(t, 1.0, s.startShare(context.Background(), "new"))
	require.Equal(t, [][]store.QuotaClaim{{{Key: "new", Demand: backlogDemand, Share: shaping.ShareFloorDefault}}}, l.claims)
	l.err = errors.New("database down")
	require.Equal(t, shaping.ShareFloorDefault, s.startShare(context.Background(), "newer"))
}

// TestLedgerRun: a round every Period; the rows are deleted when it stops.
func TestLedgerRun(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	l := &ledgerFake{}
	s := newTestLedger(t, l, quotaList{{key: "q"}}, clock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(LedgerPeriodDefault)
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.claims) == 1
	}, 10*time.Second, time.Millisecond)
	cancel()
	<-done
	require.Equal(t, []string{"me"}, l.left)
}

func TestLedgerConfig(t *testing.T) {
	t.Parallel()
	_, err := newLedgerSync(ledgerSyncConfig{Ledger: &ledgerFake{}, Quotas: quotaList{}, Replica: "me",
		Period: time.Second, Lease: time.Second})
	require.ErrorContains(t, err, "must be longer than Period")
	_, err = newLedgerSync(ledgerSyncConfig{Ledger: &ledgerFake{}, Quotas: quotaList{}})
	require.ErrorContains(t, err, "required")
}
