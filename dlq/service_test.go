package dlq

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// deadLettered runs job id through the writer and returns its letter.
func (b *dlqBundle) deadLettered(t *testing.T, id string) *store.DeadLetter {
	t.Helper()
	msg := b.claimedJob(t, id)
	require.NoError(t, b.writer.DeadLetter(b.ctx, b.letter(id, msg)))
	require.Equal(t, "jobs.dlq", b.pub.next(t).dest)
	recs, _, err := b.svc.List(b.ctx, store.DeadLetterListOptions{DeadLetterFilter: store.DeadLetterFilter{JobID: id}})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	return recs[0]
}

func TestReplayTwiceGivesOneNewMessage(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	r := b.deadLettered(t, "j1")

	_, err := b.svc.Replay(b.ctx, "other", r.ID)
	require.ErrorIs(t, err, ErrNotFound)

	results := make([]ReplayResult, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i], errs[i] = b.svc.Replay(b.ctx, "acme", r.ID) })
	}
	wg.Wait()
	replayed := 0
	for i := range results {
		require.NoError(t, errs[i])
		if results[i].Replayed {
			replayed++
			require.NotNil(t, results[i].Record.ReplayPublishedAt)
			require.Equal(t, 1, results[i].Record.ReplayCount)
		}
	}
	require.Equal(t, 1, replayed)
	res, err := b.svc.Replay(b.ctx, "", r.ID)
	require.NoError(t, err)
	require.False(t, res.Replayed)

	p := b.pub.next(t)
	b.pub.none(t)
	require.Equal(t, testDest, p.dest)
	require.Equal(t, r.Message, p.msg.Value)
	require.Equal(t, []byte("acme"), p.msg.Key)
	require.Equal(t, uint8(9), p.msg.Priority)
	require.Equal(t, map[string]string{"trace": "t1", HeaderReplayOf: strconv.FormatInt(r.ID, 10)}, p.msg.Headers)

	job := b.jobStatus(t, "j1")
	require.Equal(t, llmq.StatusQueued, job.Status)
	require.Equal(t, 0, job.Attempts)
	require.Equal(t, "", job.ErrorCode)
	require.Equal(t, 1.0, gather(t, b.reg)["llmq_dlq_replays_total"])

	// Dead-lettered again after the replay: a new letter, replayable once.
	b.claim(t, "j1")
	require.NoError(t, b.writer.DeadLetter(b.ctx, b.letter("j1", r.Message)))
	b.pub.next(t)
	recs, _, err := b.svc.List(b.ctx, store.DeadLetterListOptions{DeadLetterFilter: store.DeadLetterFilter{JobID: "j1"}})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Nil(t, recs[0].ReplayedAt)
	res, err = b.svc.Replay(b.ctx, "acme", recs[0].ID)
	require.NoError(t, err)
	require.True(t, res.Replayed)
	b.pub.next(t)
}

func TestReplayRefusesJobNotDeadLettered(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	msg := b.claimedJob(t, "j1")
	b.pub.setFail(errors.New("broker down"))
	l := b.letter("j1", msg)
	l.LeaseToken = 0 // the broker gave up a message of the job
	require.Error(t, b.writer.DeadLetter(b.ctx, l))
	b.pub.setFail(nil)
	recs, _, err := b.svc.List(b.ctx, store.DeadLetterListOptions{})
	require.NoError(t, err)
	// The job is still with the worker (running): replaying would run it twice.
	_, err = b.svc.Replay(b.ctx, "acme", recs[0].ID)
	require.ErrorIs(t, err, ErrNotReplayable)
	_, err = b.svc.Replay(b.ctx, "acme", 999)
	require.ErrorIs(t, err, ErrNotFound)
	b.pub.none(t)
}

func TestReplayPublishFailureIsRepaired(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	r := b.deadLettered(t, "j1")
	broken := errors.New("broker down")
	b.pub.setFail(broken)
	_, err := b.svc.Replay(b.ctx, "acme", r.ID)
	require.ErrorIs(t, err, broken)
	b.pub.setFail(nil)
	// The replay was begun: another replay publishes nothing.
	res, err := b.svc.Replay(b.ctx, "acme", r.ID)
	require.NoError(t, err)
	require.False(t, res.Replayed)
	require.Nil(t, res.Record.ReplayPublishedAt)
	b.pub.none(t)

	b.clock.Advance(RepairAfterDefault + time.Second)
	st, err := b.writer.Repair(b.ctx)
	require.NoError(t, err)
	require.Equal(t, RepairStats{Replayed: 1}, st)
	p := b.pub.next(t)
	require.Equal(t, testDest, p.dest)
	b.pub.none(t)
	st, err = b.writer.Repair(b.ctx)
	require.NoError(t, err)
	require.Equal(t, RepairStats{}, st)
	require.Equal(t, llmq.StatusQueued, b.jobStatus(t, "j1").Status)
	got, err := b.svc.Get(b.ctx, "acme", r.ID)
	require.NoError(t, err)
	require.NotNil(t, got.ReplayPublishedAt)
}

func TestReplayWithoutPublisher(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	r := b.deadLettered(t, "j1")
	svc, err := NewService(Config{Store: b.store.DeadLetters()})
	require.NoError(t, err)
	_, err = svc.Replay(b.ctx, "", r.ID)
	require.ErrorIs(t, err, ErrNoPublisher)
}

func TestPurgeNeedsFilter(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	b.deadLettered(t, "j1")
	b.deadLettered(t, "j2")
	require.NoError(t, b.writer.DeadLetter(b.ctx, Letter{Reason: ReasonPoison, Message: []byte("x")}))
	b.pub.next(t)

	_, err := b.svc.Purge(b.ctx, store.DeadLetterFilter{})
	require.ErrorIs(t, err, ErrEmptyFilter)
	recs, _, err := b.svc.List(b.ctx, store.DeadLetterListOptions{})
	require.NoError(t, err)
	require.Len(t, recs, 3)

	n, err := b.svc.Purge(b.ctx, store.DeadLetterFilter{Reason: string(ReasonPoison)})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	n, err = b.svc.Purge(b.ctx, store.DeadLetterFilter{All: true})
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	// Purging a letter leaves its job as it is.
	require.Equal(t, llmq.StatusDeadLettered, b.jobStatus(t, "j1").Status)
}

// TestForgedLetterCannotTouchAnotherTenantsJob: a letter of tenant evil
// that names acme's job id (a message forged with acme's job id) names
// evil's job of that id, never acme's: acme's running job is neither
// dead-lettered by the letter nor requeued by its replay.
func TestForgedLetterCannotTouchAnotherTenantsJob(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	b.claimedJob(t, "victim") // acme's job
	require.NoError(t, b.writer.DeadLetter(b.ctx, Letter{JobID: "victim", Tenant: "evil", Reason: ReasonPoison,
		Message: []byte(`{"id":"victim","tenant":"evil","body":{}}`)}))
	b.pub.next(t)
	require.Equal(t, llmq.StatusRunning, b.jobStatus(t, "victim").Status, "acme's job was not dead-lettered")
	forged, _, err := b.svc.List(b.ctx, store.DeadLetterListOptions{DeadLetterFilter: store.DeadLetterFilter{Tenant: "evil"}})
	require.NoError(t, err)
	require.Len(t, forged, 1)
	res, err := b.svc.Replay(b.ctx, "evil", forged[0].ID)
	require.NoError(t, err)
	require.NotNil(t, res.Record.ReplayedAt)
	// The replay publishes evil's own message again, for evil's job.
	require.JSONEq(t, `{"id":"victim","tenant":"evil","body":{}}`, string(b.pub.next(t).msg.Value))
	b.pub.none(t)
	require.Equal(t, llmq.StatusRunning, b.jobStatus(t, "victim").Status, "acme's job was not requeued")
}

func TestRepairSkipsReplayOfJobAlreadyLive(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	r := b.deadLettered(t, "j1")
	b.pub.setFail(errors.New("broker down"))
	_, err := b.svc.Replay(b.ctx, "acme", r.ID)
	require.Error(t, err)
	b.pub.setFail(nil)
	// The requeued job is claimed before the sweep.
	require.Equal(t, llmq.StatusQueued, b.jobStatus(t, "j1").Status)
	b.claim(t, "j1")

	b.clock.Advance(RepairAfterDefault + time.Second)
	st, err := b.writer.Repair(b.ctx)
	require.NoError(t, err)
	require.Equal(t, RepairStats{Replayed: 1}, st)
	b.pub.none(t)
	st, err = b.writer.Repair(b.ctx)
	require.NoError(t, err)
	require.Equal(t, RepairStats{}, st)
	require.Equal(t, llmq.StatusRunning, b.jobStatus(t, "j1").Status)
}
