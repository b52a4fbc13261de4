package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// memIngest is an in-memory ingestStore: it records jobs by id, and fails
// every statement while down, or any insert that holds a job of refuse.
type memIngest struct {
	mu     sync.Mutex
	jobs   map[string]store.NewJob
	down   bool
	refuse string
}

var errDown = errors.New("connection refused")

func (s *memIngest) Ingest(_ context.Context, jobs []store.NewJob) ([]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, errDown
	}
	for _, j := range jobs {
		if j.Job.ID == s.refuse {
			return nil, fmt.Errorf("insert %s: %w", j.Job.ID, errDown)
		}
	}
	created := make([]bool, len(jobs))
	for i, j := range jobs {
		if _, ok := s.jobs[j.Job.ID]; !ok {
			s.jobs[j.Job.ID], created[i] = j, true
		}
	}
	return created, nil
}

func (s *memIngest) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id := range s.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (s *memIngest) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func (s *memIngest) QueuedCount(context.Context, int64) (int64, error) { return 0, nil }
func (s *memIngest) QueueTenants(context.Context, time.Time) ([]store.TenantQueue, error) {
	return nil, nil
}
func (s *memIngest) CountQueued(_ context.Context, ts []string, _ []int64) ([]int64, error) {
	return make([]int64, len(ts)), nil
}
func (s *memIngest) Ping(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errDown
	}
	return nil
}

// memLetters records the dead letters.
type memLetters struct {
	mu      sync.Mutex
	letters []dlq.Letter
}

func (d *memLetters) DeadLetter(_ context.Context, l dlq.Letter) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.letters = append(d.letters, l)
	return nil
}

// settled records how each message of a test ended: "ack" or "nack".
type settled struct {
	mu  sync.Mutex
	how map[string]string
}

func (s *settled) msg(value string) *transport.Message {
	set := func(how string) func(context.Context) error {
		return func(context.Context) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.how[value] = how
			return nil
		}
	}
	return transport.NewMessage(transport.Message{Value: []byte(value), Source: "test"}, set("ack"), set("nack"))
}

func (s *settled) get() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.how)
}

type ingesterBundle struct {
	in      *ingester
	st      *memIngest
	letters *memLetters
	msgs    *settled
	clock   *clockwork.FakeClock
	models  chan string
}

func setupIngester(t *testing.T) *ingesterBundle {
	t.Helper()
	est, err := shaping.NewEstimator(shaping.EstimatorConfig{})
	require.NoError(t, err)
	b := &ingesterBundle{st: &memIngest{jobs: map[string]store.NewJob{}}, letters: &memLetters{},
		msgs: &settled{how: map[string]string{}}, clock: clockwork.NewFakeClock(), models: make(chan string, 16)}
	b.in, err = newIngester(ingesterConfig{Store: b.st, DeadLetters: b.letters, Tenants: func() llmq.Tenants { return nil },
		Sizer: store.Sizer{Estimator: est}, Recorded: func(m string) { b.models <- m },
		Metrics: newMetrics(prometheus.NewRegistry()), Clock: b.clock, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	b.in.ctx = context.Background()
	return b
}

func ingestJob(id string) string {
	return fmt.Sprintf(`{"id":%q,"body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`, id)
}

func TestIngesterConfig(t *testing.T) {
	t.Parallel()
	_, err := newIngester(ingesterConfig{})
	require.ErrorContains(t, err, "Store, DeadLetters, Tenants and Metrics are required")
	in, err := newIngester(ingesterConfig{Store: &memIngest{}, DeadLetters: &memLetters{},
		Tenants: func() llmq.Tenants { return nil }, Metrics: &metrics{}, Window: -2})
	require.ErrorContains(t, err, "Window and TenantCap")
	require.Nil(t, in)
	in, err = newIngester(ingesterConfig{Store: &memIngest{}, DeadLetters: &memLetters{},
		Tenants: func() llmq.Tenants { return nil }, Metrics: &metrics{}})
	require.NoError(t, err)
	require.Equal(t, []int{IngestWindowDefault, TenantCapDefault, IngestBatchDefault, IngestPrefetchDefault},
		[]int{in.cfg.Window, in.cfg.TenantCap, in.cfg.Batch, in.cfg.Prefetch})
}

// TestIngesterBatch: a batch's jobs are recorded and acked (a duplicate
// too, recorded once), a message that is no job is dead-lettered poison
// and acked, and the scheduler learns the model of the jobs newly queued.
func TestIngesterBatch(t *testing.T) {
	t.Parallel()
	b := setupIngester(t)
	a, poison, dup := ingestJob("job-a"), "not json", ingestJob("job-a")
	b.in.ingest([]*transport.Message{b.msgs.msg(a), b.msgs.msg(poison), b.msgs.msg(dup)})
	require.Equal(t, []string{"job-a"}, b.st.ids())
	require.Equal(t, map[string]string{a: "ack", poison: "ack"}, b.msgs.get())
	require.Len(t, b.letters.letters, 1)
	require.Equal(t, dlq.ReasonPoison, b.letters.letters[0].Reason)
	require.Equal(t, "m", <-b.models)
	require.Empty(t, b.models, "told once: the duplicate was not newly queued")
	require.Equal(t, int64(1), b.in.window.value(), "the window counts the job recorded")
	b.in.claimed([]*store.JobRecord{{}})
	require.Equal(t, int64(0), b.in.window.value(), "and the claims")
}

// TestIngesterDatabaseDown: while every insert fails and the database does
// not answer, the batch is held and tried again on the clock, never
// handed back; once the database is back it is recorded and acked.
func TestIngesterDatabaseDown(t *testing.T) {
	t.Parallel()
	b := setupIngester(t)
	b.st.setDown(true)
	a, c := ingestJob("job-a"), ingestJob("job-c")
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.in.ingest([]*transport.Message{b.msgs.msg(a), b.msgs.msg(c)})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		require.NoError(t, b.clock.BlockUntilContext(ctx, 1))
		require.Empty(t, b.msgs.get(), "held while the database is down")
		b.clock.Advance(ingestRetryMax)
	}
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1))
	b.st.setDown(false)
	b.clock.Advance(ingestRetryMax)
	<-done
	require.Equal(t, map[string]string{a: "ack", c: "ack"}, b.msgs.get())
	require.Equal(t, []string{"job-a", "job-c"}, b.st.ids())
}

// TestIngesterHandsBack: a message that fails alone while the database
// answers is handed back after handBackDelay, the others recorded.
func TestIngesterHandsBack(t *testing.T) {
	t.Parallel()
	b := setupIngester(t)
	b.st.refuse = "job-bad"
	a, bad := ingestJob("job-a"), ingestJob("job-bad")
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.in.ingest([]*transport.Message{b.msgs.msg(a), b.msgs.msg(bad)})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1))
	require.Equal(t, map[string]string{a: "ack"}, b.msgs.get(), "held handBackDelay before it goes back")
	b.clock.Advance(handBackDelay)
	<-done
	require.Equal(t, map[string]string{a: "ack", bad: "nack"}, b.msgs.get())
	require.Equal(t, []string{"job-a"}, b.st.ids())
	require.Empty(t, b.letters.letters)
}
