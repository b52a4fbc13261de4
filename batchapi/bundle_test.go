package batchapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jonboulle/clockwork"
	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

// testBundle is one isolated world: its own database, simulator (on a fake
// clock), in-memory broker queue and batch lane.
type testBundle struct {
	st     *store.Store
	sim    *upstreamsim.TestServer
	simCfg upstreamsim.Config
	clock  *clockwork.FakeClock
	client *openai.Client
	cfg    Config
	// lane is the batch lane's clock (routing and deadlines), apart
	// from the simulator's.
	lane   *clockwork.FakeClock
	router *Router
}

// night is inside the default off-peak window.
var night = time.Date(2026, 6, 15, 23, 0, 0, 0, time.UTC)

func simConfig() upstreamsim.Config {
	return upstreamsim.Config{
		Batch:  upstreamsim.BatchConfig{Validating: 5 * time.Second, LinesPerSecond: 50, Finalizing: 5 * time.Second, CompletionWindow: time.Hour},
		Output: upstreamsim.OutputConfig{Distribution: "fixed", Min: 1, Max: 100, Mean: 7},
	}
}

func setup(t *testing.T, simCfg upstreamsim.Config, mod func(*Config)) *testBundle {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDB(t))
	require.NoError(t, err)
	t.Cleanup(st.Close)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 6, 15, 23, 0, 0, 0, time.UTC))
	sim := upstreamsim.NewTestServer(t, simCfg, upstreamsim.WithClock(clock))
	b := &testBundle{
		st: st, sim: sim, simCfg: simCfg, clock: clock, client: newClient(t, sim, nil), lane: clockwork.NewFakeClockAt(night),
	}
	b.cfg = Config{
		Store: st.Batches(), Client: b.client,
		Catalog:  llmq.Catalog{Models: map[string]llmq.Model{"gpt-4o-mini": {InputPricePer1M: 0.15, OutputPricePer1M: 0.60}}},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock:    b.lane,
		MaxLines: 1000,
	}
	if mod != nil {
		mod(&b.cfg)
	}
	b.router, err = NewRouter(b.cfg)
	require.NoError(t, err)
	return b
}

// setNow moves the batch lane's clock forward to at.
func (b *testBundle) setNow(t *testing.T, at time.Time) {
	t.Helper()
	d := at.Sub(b.lane.Now())
	require.GreaterOrEqual(t, d, time.Duration(0), "the lane's clock only moves forward")
	b.lane.Advance(d)
}

// newClient returns a go-openai client of sim whose transport is rt (nil:
// the default), closing its idle connections at the end of the test.
func newClient(t *testing.T, sim *upstreamsim.TestServer, rt http.RoundTripper) *openai.Client {
	cc := sim.ClientConfig("sk-test")
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	if rt == nil {
		rt = tr
	}
	cc.HTTPClient = &http.Client{Timeout: 30 * time.Second, Transport: rt}
	return NewClient(cc, 0)
}

func job(id, model string, deadline *time.Time) *llmq.Job {
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"summarise log line %s"}],"max_tokens":16}`, model, id)
	j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":%q,"deferrable":true,"body":%s}`, id, body)), llmq.DecodeOptions{})
	if err != nil {
		panic(err)
	}
	j.Deadline = deadline
	return j
}

// route records n deferrable jobs as the worker's ingest does: queued, lane
// undecided. It returns their ids.
func (b *testBundle) route(t *testing.T, prefix, model string, n int, deadline *time.Time) []string {
	t.Helper()
	ids := make([]string, n)
	jobs := make([]store.NewJob, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%05d", prefix, i)
		jobs[i] = store.NewJob{Job: job(ids[i], model, deadline)}
	}
	for len(jobs) > 0 {
		k := min(len(jobs), 1000)
		_, err := b.st.Queue().Ingest(context.Background(), jobs[:k])
		require.NoError(t, err)
		jobs = jobs[k:]
	}
	return ids
}

func (b *testBundle) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE `+where, args...).Scan(&n))
	return n
}

// countOrNeg is count for use off the test goroutine: -1 on error.
func (b *testBundle) countOrNeg(where string) int {
	var n int
	if err := b.st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE `+where).Scan(&n); err != nil {
		return -1
	}
	return n
}

// liveWorker stands in for the live worker: it claims jobs from Postgres
// as the worker's scheduler does while the router holds deferrable jobs
// (at the lane clock's time), calls the simulator and stores the results,
// until want jobs are done; none of them may stay in the batch lane.
func (b *testBundle) liveWorker(t *testing.T, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for done := 0; done < want; {
		h := b.router.Hold(b.lane.Now(), 0)
		models, err := b.st.Queue().QueuedModels(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, models, "live worker: %d of %d jobs done", done, want)
		recs, err := b.st.Queue().Claim(ctx, store.ClaimRequest{Model: models[0], Owner: "live-worker", Lease: time.Minute,
			Limit: want - done, HoldDeferrable: h.Batch, HoldDeadlineAfter: h.DeadlineAfter, LiveReason: h.LiveReason})
		require.NoError(t, err)
		require.NotEmpty(t, recs, "live worker: %d of %d jobs done", done, want)
		for _, rec := range recs {
			require.Equal(t, store.LaneLive, rec.Lane)
			var req openai.ChatCompletionRequest
			require.NoError(t, json.Unmarshal(rec.Body, &req))
			resp, err := b.client.CreateChatCompletion(ctx, req)
			require.NoError(t, err)
			raw, err := json.Marshal(resp)
			require.NoError(t, err)
			stored, err := b.st.Queue().StoreResult(ctx, rec.Key(), store.Result{Response: raw, UsedModel: resp.Model,
				PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens})
			require.NoError(t, err)
			require.True(t, stored)
			done++
		}
	}
}

// requireOwnResults checks that each of the want succeeded jobs holds the
// answer to its own request, whichever lane ran it. The simulator's
// completion is a function of the request (seed, model, messages), and
// every job asks about its own id, so a second simulator with the same
// seed, asked live, gives each job's expected text.
func (b *testBundle) requireOwnResults(t *testing.T, want int) {
	t.Helper()
	ctx := context.Background()
	cfg := b.simCfg
	cfg.Default.RPM, cfg.Default.TPM = -1, -1
	cfg.Models = nil
	client := newClient(t, upstreamsim.NewTestServer(t, cfg), nil)
	type row struct{ id, body, content string }
	rows, err := b.st.Pool().Query(ctx, `SELECT id, body::text, coalesce(result->'choices'->0->'message'->>'content', '')
		FROM jobs WHERE status = 'succeeded' ORDER BY id`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.body, &x.content)
	})
	require.NoError(t, err)
	require.Len(t, got, want)
	var g errgroup.Group
	g.SetLimit(8)
	var mu sync.Mutex
	var wrong []string
	for _, r := range got {
		g.Go(func() error {
			var req openai.ChatCompletionRequest
			if err := json.Unmarshal([]byte(r.body), &req); err != nil {
				return err
			}
			resp, err := client.CreateChatCompletion(ctx, req)
			if err != nil {
				return err
			}
			if resp.Choices[0].Message.Content != r.content {
				mu.Lock()
				wrong = append(wrong, r.id)
				mu.Unlock()
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	require.Empty(t, wrong, "jobs holding another job's answer")
}

// cutAfter is a transport that lets a request matching match reach the
// server but loses its response (as a crash right after the call would).
type cutAfter struct {
	next  http.RoundTripper
	match func(*http.Request) bool
	cuts  atomic.Int32
}

func (c *cutAfter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil && c.match(r) && c.cuts.Add(-1) >= 0 {
		resp.Body.Close()
		return nil, errors.New("connection lost after the request")
	}
	return resp, err
}

type letterFunc func(ctx context.Context, l dlq.Letter) error

func (f letterFunc) DeadLetter(ctx context.Context, l dlq.Letter) error { return f(ctx, l) }

func recordLetters(ids *[]string) DeadLetterer {
	var mu sync.Mutex
	return letterFunc(func(_ context.Context, l dlq.Letter) error {
		mu.Lock()
		defer mu.Unlock()
		*ids = append(*ids, l.JobID)
		return nil
	})
}
