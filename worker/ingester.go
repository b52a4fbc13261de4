package worker

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// ingestStore is what the ingest needs of the job store ([JobStore]).
type ingestStore interface {
	Ingest(ctx context.Context, jobs []store.NewJob) (created []bool, err error)
	QueuedCount(ctx context.Context, limit int64) (int64, error)
	QueueTenants(ctx context.Context, since time.Time) ([]store.TenantQueue, error)
	CountQueued(ctx context.Context, tenants []string, limits []int64) ([]int64, error)
	Ping(ctx context.Context) error
}

// ingesterConfig configures an ingester (ingest.go, ingest_tenants.go).
type ingesterConfig struct {
	Store       ingestStore  // required
	DeadLetters DeadLetterer // required
	// Tenants are the tenants applied now (their projects, weights and
	// replies). Required.
	Tenants func() llmq.Tenants
	// Catalog, Sizer, TenantReplies, ResultsTopic and MaxMessageBytes are
	// Config's.
	Catalog         func() llmq.Catalog
	Sizer           store.Sizer
	TenantReplies   TenantReplier
	ResultsTopic    string
	MaxMessageBytes int
	// Window, TenantCap, Batch and Prefetch are Config's IngestWindow,
	// TenantCap, IngestBatch and IngestPrefetch, with their defaults
	// (-1: no window, no cap).
	Window, TenantCap, Batch, Prefetch int
	// Recorded is told the model of every job newly queued, Wake once
	// per statement that queued some (nil: none).
	Recorded func(model string)
	Wake     func()
	Metrics  *metrics // required
	Clock    clockwork.Clock
	Log      *slog.Logger
}

func (c ingesterConfig) withDefaults() ingesterConfig {
	if c.Catalog == nil {
		c.Catalog = zeroCatalog
	}
	c.Window = cmp.Or(c.Window, IngestWindowDefault)
	c.TenantCap = cmp.Or(c.TenantCap, TenantCapDefault)
	c.Batch = cmp.Or(max(0, c.Batch), IngestBatchDefault)
	c.Prefetch = cmp.Or(max(0, c.Prefetch), IngestPrefetchDefault)
	if c.Recorded == nil {
		c.Recorded = func(string) {}
	}
	if c.Wake == nil {
		c.Wake = func() {}
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

func (c ingesterConfig) validate() error {
	var errs []error
	if c.Store == nil || c.DeadLetters == nil || c.Tenants == nil || c.Metrics == nil {
		errs = append(errs, errors.New("worker: ingester: Store, DeadLetters, Tenants and Metrics are required"))
	}
	if c.Window < -1 || c.TenantCap < -1 {
		errs = append(errs, errors.New("worker: ingester: Window and TenantCap must be positive, or -1 for none"))
	}
	return errors.Join(errs...)
}

// ingester records the broker's messages as queued jobs (ingest.go): one
// forwarder and two ingest loops, from start until the subscription's
// context ends.
type ingester struct {
	cfg ingesterConfig
	// ctx is the context start was given: its end stops the loops.
	ctx     context.Context
	running sync.WaitGroup
	// windowReadAt is when the queued count was last read;
	// windowLoggedAt when a pause was last logged (unix nanoseconds).
	windowReadAt, windowLoggedAt atomic.Int64
	// window is the count of queued jobs behind the ingest window.
	window windowCount
	// tenants counts each tenant's jobs (ingest_tenants.go), read at
	// tenantsReadAt (unix nanoseconds).
	tenants       tenantCount
	tenantsReadAt atomic.Int64
	// ingestFailing is set while inserts fail on the database.
	ingestFailing atomic.Bool
	// deliveries counts the deliveries of a message that failed to be
	// recorded.
	deliveries deliveries
}

func newIngester(cfg ingesterConfig) (*ingester, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &ingester{cfg: cfg, deliveries: newDeliveries()}, nil
}

// start ingests msgs until ctx ends (Stop begins) or msgs closes. The
// messages queue up in a buffer while a batch is recorded, so the next
// batch takes them all; two ingest loops, one recording a batch while the
// other gathers the next. The subscriber's prefetch bounds the messages
// delivered and not yet acked.
func (in *ingester) start(ctx context.Context, msgs <-chan *transport.Message) {
	in.ctx = ctx
	buf := make(chan *transport.Message, in.cfg.Prefetch)
	in.running.Add(1 + ingesters)
	go in.forward(msgs, buf)
	for range ingesters {
		go in.ingestLoop(buf)
	}
}

// wait returns once the loops have ended.
func (in *ingester) wait() { in.running.Wait() }

// ingesters is the number of ingest loops.
const ingesters = 2

// claimed counts jobs claimed from the queue, which the window and the
// tenants' shares of it follow.
func (in *ingester) claimed(recs []*store.JobRecord) {
	in.window.add(0, int64(len(recs)))
	for _, rec := range recs {
		in.tenants.add(rec.Tenant, 1, true)
	}
}

// traceIngested ends the ingest spans of items, recorded or handed back.
func (in *ingester) traceIngested(items []ingestItem) {
	for _, it := range items {
		if it.span != nil {
			it.span.End()
		}
	}
}
