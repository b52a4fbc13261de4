package dlq

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
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
	svc, err := NewService(Config{Store: b.store})
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

func TestHTTPHandler(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	var ids []int64 // newest first
	for i := range 5 {
		r := b.deadLettered(t, fmt.Sprintf("j%d", i))
		ids = append([]int64{r.ID}, ids...)
		b.clock.Advance(time.Second)
	}
	// Another tenant's letter.
	require.NoError(t, b.writer.DeadLetter(b.ctx, Letter{JobID: "x", Tenant: "other", Reason: ReasonPoison, Message: []byte("bad")}))
	b.pub.next(t)
	others, _, err := b.svc.List(b.ctx, store.DeadLetterListOptions{DeadLetterFilter: store.DeadLetterFilter{Tenant: "other"}})
	require.NoError(t, err)

	srv := httptest.NewServer(NewHTTPHandler(b.svc, func(r *http.Request) (string, bool) {
		t := r.Header.Get("X-Tenant")
		return t, t != ""
	}))
	t.Cleanup(srv.Close)
	do := func(method, path, tenant string, wantStatus int, out any) {
		t.Helper()
		req, err := http.NewRequestWithContext(b.ctx, method, srv.URL+path, nil)
		require.NoError(t, err)
		if tenant != "" {
			req.Header.Set("X-Tenant", tenant)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, wantStatus, resp.StatusCode, path)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
	type page struct {
		Data []struct {
			ID       int64           `json:"id"`
			JobID    string          `json:"job_id"`
			Tenant   string          `json:"tenant"`
			Reason   string          `json:"reason"`
			Attempts int             `json:"attempts"`
			Message  json.RawMessage `json:"message"`
			Preview  string          `json:"message_preview"`
			Bytes    int             `json:"message_bytes"`
		} `json:"data"`
		NextCursor *string `json:"next_cursor"`
	}
	var got []int64
	cursor, pages := "", 0
	for {
		var p page
		do("GET", "/v1/dead-letters?limit=2&cursor="+cursor, "acme", http.StatusOK, &p)
		pages++
		for _, d := range p.Data {
			require.Equal(t, "acme", d.Tenant)
			require.Equal(t, "retries_exhausted", d.Reason)
			require.Equal(t, 8, d.Attempts)
			msg := fmt.Sprintf(`{"id":%q,"tenant":"acme","priority":"high","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`, d.JobID)
			// A list shows the start of the message, the single letter
			// the whole.
			require.Nil(t, d.Message)
			require.Equal(t, len(msg), d.Bytes)
			require.JSONEq(t, msg, d.Preview)
			var whole struct {
				Message json.RawMessage `json:"message"`
			}
			do("GET", fmt.Sprintf("/v1/dead-letters/%d", d.ID), "acme", http.StatusOK, &whole)
			require.JSONEq(t, msg, string(whole.Message))
			got = append(got, d.ID)
		}
		if p.NextCursor == nil {
			break
		}
		cursor = *p.NextCursor
	}
	require.Equal(t, 3, pages)
	require.Equal(t, ids, got)

	var p page
	do("GET", "/v1/dead-letters?reason=poison", "acme", http.StatusOK, &p)
	require.Empty(t, p.Data)
	require.NotNil(t, p.Data)
	require.Nil(t, p.NextCursor)

	type errBody struct {
		Error struct{ Code, Message, Field string } `json:"error"`
	}
	var e errBody
	do("GET", "/v1/dead-letters?limit=0", "acme", http.StatusBadRequest, &e)
	require.Equal(t, "invalid_value", e.Error.Code)
	require.Equal(t, "limit", e.Error.Field)
	// Values the database could not even compare are refused first.
	for path, field := range map[string]string{
		"/v1/dead-letters?reason=oops": "reason", "/v1/dead-letters?reason=a%00": "reason",
		"/v1/dead-letters?job_id=%FF": "job_id", "/v1/dead-letters?job_id=a%00b": "job_id",
		"/v1/dead-letters?cursor=%FF%00": "cursor",
	} {
		e = errBody{}
		do("GET", path, "acme", http.StatusBadRequest, &e)
		require.Equal(t, field, e.Error.Field, path)
	}
	do("GET", "/v1/dead-letters/%FF", "acme", http.StatusNotFound, &e)
	do("GET", fmt.Sprintf("/v1/dead-letters/%d", others[0].ID), "acme", http.StatusNotFound, &e)
	do("GET", "/v1/dead-letters?since=yesterday", "acme", http.StatusBadRequest, &e)
	require.Equal(t, "since", e.Error.Field)
	do("GET", "/v1/dead-letters?cursor=zz", "acme", http.StatusBadRequest, &e)
	require.Equal(t, "cursor", e.Error.Field)
	do("GET", "/v1/dead-letters", "", http.StatusUnauthorized, &e)
	require.Equal(t, "unauthorized", e.Error.Code)

	// Replay: another tenant's letter is not found; ours replays once.
	e = errBody{}
	do("POST", fmt.Sprintf("/v1/dead-letters/%d/replay", others[0].ID), "acme", http.StatusNotFound, &e)
	require.Equal(t, "not_found", e.Error.Code)
	require.Equal(t, "id", e.Error.Field)
	do("POST", "/v1/dead-letters/abc/replay", "acme", http.StatusNotFound, &e)
	b.pub.none(t)
	type replayed struct {
		Data struct {
			ID          int64 `json:"id"`
			ReplayCount int   `json:"replay_count"`
		} `json:"data"`
		Replayed bool `json:"replayed"`
	}
	var rp replayed
	do("POST", fmt.Sprintf("/v1/dead-letters/%d/replay", ids[0]), "acme", http.StatusOK, &rp)
	require.True(t, rp.Replayed)
	require.Equal(t, ids[0], rp.Data.ID)
	require.Equal(t, 1, rp.Data.ReplayCount)
	do("POST", fmt.Sprintf("/v1/dead-letters/%d/replay", ids[0]), "acme", http.StatusOK, &rp)
	require.False(t, rp.Replayed)
	require.Equal(t, testDest, b.pub.next(t).dest)
	b.pub.none(t)

	// The other tenant's poison letter shows its bytes in base64.
	var raw map[string]any
	do("GET", fmt.Sprintf("/v1/dead-letters/%d", others[0].ID), "other", http.StatusOK, &raw)
	require.Equal(t, "YmFk", raw["message_base64"])
	require.NotContains(t, raw, "message")
}

// TestHTTPListIsBounded: a page of letters of 1 MiB messages and long
// upstream errors stays small: previews, not messages, and sanitised,
// bounded last errors.
func TestHTTPListIsBounded(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t)
	big := []byte(`{"body":{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 1<<20) + `"}]}}`)
	lastErr := "502: <html>" + strings.Repeat("gateway error ", 1000) + "Authorization: Bearer sk-secret0123456789</html>"
	for i := range 5 {
		require.NoError(t, b.writer.DeadLetter(b.ctx, Letter{JobID: fmt.Sprintf("big-%d", i), Tenant: "acme",
			Reason: ReasonRetriesExhausted, LastError: lastErr, Message: big}))
		b.pub.next(t)
	}
	srv := httptest.NewServer(NewHTTPHandler(b.svc, func(*http.Request) (string, bool) { return "acme", true }))
	t.Cleanup(srv.Close)
	resp, err := srv.Client().Get(srv.URL + "/v1/dead-letters")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Less(t, len(body), 5*2<<10, "five letters of 1 MiB in %d bytes", len(body))
	require.NotContains(t, string(body), "sk-secret")
	var p struct {
		Data []View `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &p))
	require.Len(t, p.Data, 5)
	for _, v := range p.Data {
		require.Equal(t, len(big), v.MessageBytes)
		require.LessOrEqual(t, len(v.MessagePreview), MessagePreviewBytes)
		require.LessOrEqual(t, len(v.LastError), 1024)
	}
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
