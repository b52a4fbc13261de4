package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/migrations"
)

// Store runs llmq's job operations on a pgx pool. It is safe for concurrent
// use. Its operations are grouped by aggregate, each a type of its own
// reached from the Store (doc.go).
type Store struct {
	*base
	owned bool
	// The aggregates, each over base (New fills them).
	queue       Queue
	jobs        Jobs
	deadLetters DeadLetters
	batches     Batches
	budgets     Budgets
	ledger      Ledger
	outbox      Outbox
	laneRates   LaneRates
	streams     Streams
}

// base is what every aggregate of the store shares: the pool, the clock,
// the claim order and the group committer, and the helpers over them.
type base struct {
	pool  *pgxpool.Pool
	clk   clockwork.Clock
	order Order
	// group batches hot-path writes into shared transactions; nil runs
	// each operation on its own.
	group *committer
	// outboxArraysFrom is InsertOutbox's outboxArraysFrom (tests lower it
	// to run the statement over arrays on a few jobs).
	outboxArraysFrom int
	// announce tells the workers the models of the jobs recorded as
	// queued, once committed (announce.go).
	announce *announcer
}

// Option tunes a Store.
type Option func(*Store)

// WithClock sets the clock of every stored time and lease expiry (default
// clockwork.NewRealClock()).
func WithClock(c clockwork.Clock) Option { return func(s *Store) { s.clk = c } }

// WithOrder sets the claim order's parameters (see SchedKey); zero fields
// take their defaults. Every process writing to one database should use the
// same.
func WithOrder(o Order) Option { return func(s *Store) { s.order = o.WithDefaults() } }

// WithGroupCommit runs claims and state changes of concurrent callers as
// shared transactions, with up to flushes transactions in flight (see
// committer). flushes <= 0 turns it off. Open enables it with
// GroupFlushesDefault; New leaves it off unless given.
func WithGroupCommit(flushes int) Option {
	return func(s *Store) {
		if s.group != nil {
			s.group.close()
			s.group = nil
		}
		if flushes > 0 {
			s.group = newCommitter(s.pool, flushes, GroupMaxOpsDefault)
		}
	}
}

// PoolMaxConnsDefault is the pool size when the URL sets no
// pool_max_conns. pgxpool's own default (the number of CPUs, at least 4)
// starves a worker holding hundreds of jobs: each job's claim and result
// are separate commits, and more connections let Postgres group the
// commits' WAL flushes.
const PoolMaxConnsDefault = 24

// Open connects a pool to databaseURL (the schema must be migrated). Close
// closes the pool.
func Open(ctx context.Context, databaseURL string, opts ...Option) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	if !strings.Contains(databaseURL, "pool_max_conns") {
		cfg.MaxConns = PoolMaxConnsDefault
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "3D000" { // invalid_catalog_name
			return nil, &NoDatabaseError{Database: cfg.ConnConfig.Database}
		}
		return nil, fmt.Errorf("store: ping: %w", err)
	}
	s := New(pool, append([]Option{WithGroupCommit(GroupFlushesDefault)}, opts...)...)
	s.owned = true
	return s, nil
}

// New wraps an existing pool; Close then leaves the pool open.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{base: &base{pool: pool, clk: clockwork.NewRealClock(), order: Order{}.WithDefaults(), outboxArraysFrom: outboxArraysFrom,
		announce: newAnnouncer(pool)}}
	for _, o := range opts {
		o(s)
	}
	s.queue = Queue{s.base, QueueFigures{s.base}}
	s.jobs = Jobs{s.base}
	s.deadLetters = DeadLetters{s.base}
	s.batches = Batches{s.base}
	s.budgets = Budgets{s.base}
	s.ledger = Ledger{s.base}
	s.outbox = Outbox{s.base, QueueFigures{s.base}}
	s.laneRates = LaneRates{s.base}
	s.streams = Streams{s.base}
	return s
}

// Queue is the store's queue: jobs, claims and leases.
func (s *Store) Queue() *Queue { return &s.queue }

// Jobs is the store's reads of the jobs.
func (s *Store) Jobs() *Jobs { return &s.jobs }

// DeadLetters is the store's dead letters.
func (s *Store) DeadLetters() *DeadLetters { return &s.deadLetters }

// Batches is the store's batch lane.
func (s *Store) Batches() *Batches { return &s.batches }

// Budgets is the store's budgets and usage.
func (s *Store) Budgets() *Budgets { return &s.budgets }

// Ledger is the store's quota ledger and door counts.
func (s *Store) Ledger() *Ledger { return &s.ledger }

// Outbox is the store's producer outbox.
func (s *Store) Outbox() *Outbox { return &s.outbox }

// LaneRates is the store's lane rates and the predictions made from them.
func (s *Store) LaneRates() *LaneRates { return &s.laneRates }

// Streams is the store's chunks of streamed calls.
func (s *Store) Streams() *Streams { return &s.streams }

// Pool is the underlying pool, for tests and migrations only: code
// outside the store runs its queries through the store's methods
// (TestAppsGoThroughTheStore in the module's root holds it).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Migrate applies the pending migrations on one connection of the pool
// and returns those it applied (migrations.UpPool).
func (s *Store) Migrate(ctx context.Context) ([]migrations.Migration, error) {
	return migrations.UpPool(ctx, s.pool)
}

// Close stops the group committer, waits for the announcement of the
// queued jobs' models in flight, and closes the pool when Open created it.
func (s *Store) Close() {
	if s.group != nil {
		s.group.close()
	}
	s.announce.wait()
	if s.owned {
		s.pool.Close()
	}
}

// Ping checks that the database answers. It is the one exported method of
// base, so every aggregate has it: each consumer tells a database that is
// down from a write it refuses.
func (s *base) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// clock is the current time at Postgres precision (microseconds).
func (s *base) clock() time.Time { return s.clk.Now().UTC().Truncate(time.Microsecond) }

// Lane values of JobRecord.Lane.
const (
	LaneLive  = "live"
	LaneBatch = "batch"
)

// Key names a job: its id is unique within its tenant.
type Key struct {
	Tenant, ID string
}

// String is "tenant/id", the form of a batch line's custom_id ('/' is in
// neither charset).
func (k Key) String() string { return k.Tenant + "/" + k.ID }

// ParseKey reads a Key from its String form.
func ParseKey(s string) (Key, bool) {
	tenant, id, ok := strings.Cut(s, "/")
	if !ok || tenant == "" || id == "" {
		return Key{}, false
	}
	return Key{Tenant: tenant, ID: id}, true
}

// Lease is a worker's hold on a job: the job's key and the token of the
// claim that gave it. Every change a holder makes is fenced to the token,
// so a holder whose lease was taken over (reaped and claimed again)
// changes nothing and gets ErrLeaseLost.
type Lease struct {
	Key
	Token int64
}

// Phases of a running job (JobRecord.Phase); "" when it is not running.
const (
	PhaseWaitingForQuota = "waiting_for_quota"
	PhaseCalling         = "calling"
	PhaseBackingOff      = "backing_off"
)

// JobRecord is one row of the jobs table.
type JobRecord struct {
	ID     string `db:"id"`
	Tenant string `db:"tenant"`
	// Project is the job's project within its tenant, "" for none.
	Project        string        `db:"project"`
	Status         llmq.Status   `db:"status"`
	Priority       llmq.Priority `db:"priority"`
	RequestedModel string        `db:"requested_model"`
	UsedModel      string        `db:"used_model"`
	// Body is the job's request; nil in List's records (Get reads it).
	Body json.RawMessage `db:"body"`
	// Result is the upstream response; nil until the job succeeded.
	Result       json.RawMessage `db:"result"`
	ErrorCode    string          `db:"error_code"`
	ErrorMessage string          `db:"error_message"`
	// ErrorStatus is the HTTP status of the upstream answer that failed the
	// job (MarkFailed); 0 when the failure is llmq's own or none.
	ErrorStatus int `db:"error_status"`
	// Attempts counts the upstream calls begun (MarkCalling), whatever
	// the deliveries, claims and workers.
	Attempts         int               `db:"attempts"`
	PromptTokens     int               `db:"prompt_tokens"`
	CompletionTokens int               `db:"completion_tokens"`
	CostUSD          float64           `db:"cost_usd"`
	CreatedAt        time.Time         `db:"created_at"`
	StartedAt        *time.Time        `db:"started_at"`
	FinishedAt       *time.Time        `db:"finished_at"`
	UpdatedAt        time.Time         `db:"updated_at"`
	Deadline         *time.Time        `db:"deadline"`
	Deferrable       bool              `db:"deferrable"`
	FallbackModels   []string          `db:"fallback_models"`
	Metadata         map[string]string `db:"metadata"`
	// LeaseOwner is the worker that last claimed the job ("" if none).
	LeaseOwner     string     `db:"lease_owner"`
	LeaseExpiresAt *time.Time `db:"lease_expires_at"`
	// LeaseToken counts the claims of the job; the holder's Lease carries
	// it.
	LeaseToken int64 `db:"lease_token"`
	// Phase is what a running job is doing (Phase*), "" otherwise.
	Phase   string `db:"phase"`
	BatchID string `db:"batch_id"`
	// Lane is LaneLive or LaneBatch; LaneReason says why it was chosen.
	Lane       string `db:"lane"`
	LaneReason string `db:"lane_reason"`
	// SchedKey is the job's place in the claim order (SchedKey).
	SchedKey time.Time `db:"sched_key"`
	// EstPromptTokens and EstOutputTokens are the shaping estimate made at
	// ingest (NewJob); 0 and 0 when the job was recorded without one.
	EstPromptTokens int `db:"est_prompt_tokens"`
	EstOutputTokens int `db:"est_output_tokens"`
	// Retries, ModelIndex, RateLimited and FreeAttempts are the rest of
	// the worker's policy state (see PolicyState).
	Retries      int `db:"retries"`
	ModelIndex   int `db:"model_index"`
	RateLimited  int `db:"rate_limited"`
	FreeAttempts int `db:"free_attempts"`
	// WaitingReason says why a queued job waits (WaitingReason*): filled
	// by Get and List, "" when nothing is known to hold it back.
	WaitingReason string `db:"-"`
	// TraceContext is the W3C trace context the job's trace continues
	// from (llmq.Job.TraceContext), "" for none.
	TraceContext string `db:"trace_context"`
	// Reply is where the job's result event goes besides Postgres
	// (llmq.Job.ReplyTo), nil for nowhere.
	Reply *llmq.Reply `db:"reply"`
}

// Key is the record's key.
func (r *JobRecord) Key() Key { return Key{Tenant: r.Tenant, ID: r.ID} }

// Lease is the hold of the claim that returned the record.
func (r *JobRecord) Lease() Lease { return Lease{Key: r.Key(), Token: r.LeaseToken} }

const jobColumns = `id, tenant, status, priority, requested_model, used_model, body, result,
	error_code, error_message, error_status, attempts, prompt_tokens, completion_tokens, cost_usd,
	created_at, started_at, finished_at, updated_at, deadline, "deferrable", fallback_models,
	metadata, lease_owner, lease_expires_at, lease_token, phase, batch_id, lane, lane_reason,
	sched_key, est_prompt_tokens, est_output_tokens, retries, model_index, rate_limited, free_attempts,
	project, trace_context, reply`

// Job rebuilds the wire job from the record (Model and MaxOutputTokens
// are read from the body).
func (r *JobRecord) Job() *llmq.Job {
	j := &llmq.Job{
		ID: r.ID, Tenant: r.Tenant, Project: r.Project, Priority: r.Priority, Deadline: r.Deadline,
		Deferrable: r.Deferrable, FallbackModels: r.FallbackModels, Metadata: r.Metadata,
		Body: r.Body, TraceContext: r.TraceContext, ReplyTo: r.Reply,
	}
	if len(j.FallbackModels) == 0 {
		j.FallbackModels = nil
	}
	if len(j.Metadata) == 0 {
		j.Metadata = nil
	}
	_ = j.Validate() // fills Model/MaxOutputTokens; the body was valid when stored
	return j
}

func scanJob(row pgx.CollectableRow) (*JobRecord, error) {
	r, err := pgx.RowToAddrOfStructByName[JobRecord](row)
	if err != nil {
		return nil, err
	}
	if r.Metadata == nil {
		r.Metadata = map[string]string{}
	}
	return r, nil
}

// queryJob runs a statement returning at most one job row; nil when none.
func (s *base) queryJob(ctx context.Context, sql string, args ...any) (*JobRecord, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	r, err := pgx.CollectOneRow(rows, scanJob)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

// dataError marks errors from data Postgres refuses (SQLSTATE class 22,
// data exception, and 54, program limit exceeded) as ErrInvalidJob.
func dataError(op string, err error) error {
	if permanent(err) {
		return fmt.Errorf("store: %s: %w: %w", op, ErrInvalidJob, err)
	}
	return fmt.Errorf("store: %s: %w", op, err)
}

// permanent reports an error that no retry can change: Postgres refused
// the data itself.
func permanent(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "54"))
}
