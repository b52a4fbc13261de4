package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/internal/workload"
	"github.com/llmq/llmq/migrations"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/worker"
)

// Settings shared by every run.
const (
	queueName       = "llmq.bench"
	tenant          = "bench"
	simAPIKey       = "sk-llmq-bench"
	publishTick     = 100 * time.Millisecond
	shutdownTimeout = 2 * time.Second
	// stopTimeout bounds the stop of the simulator and of the worker.
	stopTimeout = 10 * time.Second
)

// phase is a constant arrival rate until an offset from the start.
type phase struct {
	until time.Duration
	rate  float64 // jobs per second
}

// event changes the simulator at an offset from the start.
type event struct {
	at   time.Duration
	what string
	do   func(*upstreamsim.Server)
}

// spec is one run: a simulator, a worker configuration and a load.
type spec struct {
	name      string
	strategy  shaping.Strategy
	sim       upstreamsim.Config
	models    map[string]llmq.Model
	model     string
	fallbacks []string
	mix       workload.Mix
	sizes     workload.Sizes
	load      []phase
	events    []event
	duration  time.Duration
	// hogs is the number of other clients that keep a call to model in
	// flight all the time, on the worker's API key.
	hogs int
	// backlog jobs land at the start, before the load's arrivals.
	backlog int
	// replicas is the number of workers, each with its own lanes, on one
	// database and API key (sharing the quota through the ledger). 0 = 1.
	replicas int
	// untilDone ends the run once every job is terminal (duration is then
	// a bound).
	untilDone bool
	// viaBroker: jobs are only published, and the worker records them
	// when it ingests them (with its estimates and size delays), as for
	// an application that publishes to the broker itself; otherwise each
	// is recorded before it is published, as the producer's outbox does.
	viaBroker bool
	// sizeOrder is the setting ingest.size_order (0: the default).
	sizeOrder float64
	// broker is the first worker's broker, in a form of LLMQ_BROKER
	// ("" = an in-memory one of its own).
	broker string
}

// scaled returns s with every duration multiplied by f.
func (s spec) scaled(f float64) spec {
	mul := func(d time.Duration) time.Duration { return time.Duration(float64(d) * f) }
	s.duration = mul(s.duration)
	load := make([]phase, len(s.load))
	for i, p := range s.load {
		load[i] = phase{until: mul(p.until), rate: p.rate}
	}
	s.load = load
	events := make([]event, len(s.events))
	for i, e := range s.events {
		events[i] = e
		events[i].at = mul(e.at)
	}
	s.events = events
	return s
}

// arrivals is the number of jobs due by offset t.
func (s spec) arrivals(t time.Duration) int {
	n := float64(s.backlog)
	var from time.Duration
	for _, p := range s.load {
		to := min(t, p.until)
		if to > from {
			n += p.rate * (to - from).Seconds()
		}
		from = p.until
		if t <= p.until {
			break
		}
	}
	return int(n)
}

// sample is the state of a run at one second.
type sample struct {
	// at is the offset from the start.
	at time.Duration
	// arrived, terminal are jobs published and jobs in a terminal state.
	arrived, terminal int
	// rateLimited is the simulator's 429 count so far.
	rateLimited int64
	// concurrency is the worker's concurrency limit of the primary model.
	concurrency float64
}

// jobResult is one job's final row.
type jobResult struct {
	id        string
	kind      workload.Kind
	status    llmq.Status
	usedModel string
	latency   time.Duration // enqueue to terminal state; 0 when unfinished
}

// result is what one run measured.
type result struct {
	spec    spec
	start   time.Time
	stats   upstreamsim.Stats
	samples []sample
	jobs    []jobResult
	// span is from the first call's start to the last result.
	span time.Duration
	// toCall is each job's time from its record (created_at) to its first
	// call's start (job_attempts); toCallWarm that of the jobs recorded
	// after the first call's answer (the lane's cold start).
	toCall, toCallWarm []time.Duration
	// stages is the first worker's split of those times; recording
	// that of their record statements (about their created_at to their
	// commit).
	stages    Stages
	recording []time.Duration
}

// runOne runs spec s in a database of its own and returns what it measured.
func (b *Bench) runOne(ctx context.Context, s spec) (*result, error) {
	dbURL, drop, err := b.database(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	sim, err := upstreamsim.New(s.sim, upstreamsim.WithLogger(b.log))
	if err != nil {
		return nil, fmt.Errorf("bench: %s: simulator: %w", s.name, err)
	}
	root, err := sim.Start(ctx, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer func() { _ = app.StopWithin(ctx, sim.Stop, stopTimeout) }()

	apps, stopApps, err := b.newApps(ctx, s, dbURL, root)
	if err != nil {
		return nil, err
	}
	defer stopApps()
	st := apps[0].Store()
	_, target := apps[0].Broker()
	// A job recorded here before its message is sent carries its estimate
	// and size delay, as one recorded by the worker or the producer does.
	est, err := shaping.NewEstimator(shaping.EstimatorConfig{})
	if err != nil {
		return nil, err
	}
	f := &feed{s: s, st: st.Jobs(), queue: st.Queue(), pub: apps[0].Publisher(), dest: target.Dest, kinds: map[string]workload.Kind{},
		sizer: store.Sizer{Estimator: est, Catalog: llmq.Catalog{Models: s.models}, Order: cmp.Or(s.sizeOrder, worker.SizeOrderDefault)}}
	sim.Reset()
	hogCtx, stopHogs := context.WithCancel(ctx)
	hogsDone := startHogs(hogCtx, s.hogs, root+"/v1", s.model)
	defer func() { stopHogs(); hogsDone.Wait() }()
	for _, a := range apps {
		if err := a.Start(ctx); err != nil {
			return nil, err
		}
	}

	res := &result{spec: s, start: time.Now()}
	if err := b.drive(ctx, sim, apps[0].Registry(), f, res); err != nil {
		return nil, err
	}
	res.stats = sim.Stats()
	// The workers stop before the jobs are read: what they finish while
	// stopping counts.
	for _, a := range apps {
		_ = app.StopWithin(ctx, a.Worker().Stop, stopTimeout)
	}
	if err := readResult(ctx, st.Jobs(), f.kinds, res); err != nil {
		return nil, err
	}
	if res.stages, err = readStages(apps[0].Registry()); err != nil {
		return nil, err
	}
	res.recording = f.recording
	return res, nil
}

// newApps builds the workers of spec s: one, or s.replicas, each alone
// (no batch lane) on an in-memory broker of its own, so the jobs reach the
// replicas through Postgres. stop stops them, the last built first.
func (b *Bench) newApps(ctx context.Context, s spec, dbURL, root string) (apps []*app.App, stop func(), err error) {
	stop = func() {
		// A shutdown error does not change the figures already read.
		for _, a := range slices.Backward(apps) {
			_ = a.Stop(ctx)
		}
	}
	for i := range max(1, s.replicas) {
		url := "memory://" + s.name + "-" + uuid.NewString()[:8] + "/" + queueName
		if i == 0 && s.broker != "" {
			url = s.broker // the spec's own broker: the others reach the jobs through Postgres
		} else if i > 0 {
			url = fmt.Sprintf("memory://%s-%s-%d/%s", s.name, uuid.NewString()[:8], i, queueName)
		}
		broker, err := config.ParseBroker(url)
		if err != nil {
			stop()
			return nil, nil, err
		}
		a, err := app.New(ctx, app.Config{
			Settings: &config.Config{DatabaseURL: dbURL, Broker: broker, OpenAIBaseURL: root + "/v1", OpenAIAPIKey: simAPIKey,
				Models: s.models, Ingest: config.Ingest{SizeOrder: s.sizeOrder}},
			Migrate: true, Logger: b.log,
			Worker: &app.WorkerConfig{Strategy: s.strategy, ShutdownTimeout: shutdownTimeout, UpstreamTimeout: 30 * time.Second,
				NoBatchLane: true},
		})
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("bench: %s: %w", s.name, err)
		}
		apps = append(apps, a)
	}
	return apps, stop, nil
}

// feed publishes the jobs of a run and remembers each one's kind.
type feed struct {
	s     spec
	st    runStore
	queue jobIngester
	pub   transport.Publisher
	dest  string
	sizer store.Sizer
	kinds map[string]workload.Kind
	ids   []string
	// recording is each recorded job's record statement, from its start
	// (about the job's created_at) to its commit.
	recording []time.Duration
}

// publish sends jobs from to to-1 of the run, each recorded first unless
// the spec goes through the broker. The backlog's jobs are due together,
// and are recorded by one statement, as a producer's batch is by the
// worker's ingest: one statement a job would spread "at once" over the
// seconds of 200 commits.
func (f *feed) publish(ctx context.Context, from, to int) error {
	s := f.s
	jobs := make([]*llmq.Job, 0, to-from)
	for n := from; n < to; n++ {
		id := fmt.Sprintf("%s-%05d", s.name, n)
		raw, err := s.mix.Job(s.sizes, id, tenant, s.model, n).Encode()
		if err != nil {
			return err
		}
		j, err := llmq.Decode(raw, llmq.DecodeOptions{})
		if err != nil {
			return fmt.Errorf("bench: job %s: %w", id, err)
		}
		j.FallbackModels = s.fallbacks
		jobs = append(jobs, j)
	}
	if !s.viaBroker {
		rows := make([]store.NewJob, len(jobs))
		for i, j := range jobs {
			rows[i] = f.sizer.NewJob(j)
		}
		begin := time.Now()
		if _, err := f.queue.Ingest(ctx, rows); err != nil {
			return err
		}
		took := time.Since(begin)
		for range jobs {
			f.recording = append(f.recording, took)
		}
	}
	for i, j := range jobs {
		msg, err := producer.Message(j, producer.KeyByDefault)
		if err != nil {
			return err
		}
		f.kinds[j.ID] = s.mix.Kind(from + i)
		f.ids = append(f.ids, j.ID)
		if err := f.pub.Publish(ctx, f.dest, msg); err != nil {
			return err
		}
	}
	return nil
}

// drive runs the spec's clock: its events, its arrivals and a sample a
// second, until its duration (or, untilDone, every job terminal).
func (b *Bench) drive(ctx context.Context, sim *upstreamsim.Server, reg *prometheus.Registry, f *feed, res *result) error {
	s := f.s
	tick := time.NewTicker(publishTick)
	defer tick.Stop()
	nextSample := time.Duration(0)
	events := s.events
	for {
		at := time.Since(res.start)
		for len(events) > 0 && at >= events[0].at {
			b.log.Info("bench: event", slog.String("run", s.name), slog.String("event", events[0].what))
			events[0].do(sim)
			events = events[1:]
		}
		if len(f.ids) < s.backlog {
			if err := f.publish(ctx, 0, s.backlog); err != nil {
				return fmt.Errorf("bench: %s: publish: %w", s.name, err)
			}
		}
		for due := s.arrivals(at); len(f.ids) < due; {
			if err := f.publish(ctx, len(f.ids), len(f.ids)+1); err != nil {
				return fmt.Errorf("bench: %s: publish: %w", s.name, err)
			}
		}
		if at >= nextSample {
			smp, err := takeSample(ctx, f.st, sim, reg, s.model)
			if err != nil {
				return err
			}
			smp.at, smp.arrived = at.Round(time.Second), len(f.ids)
			res.samples = append(res.samples, smp)
			nextSample += time.Second
			if s.untilDone && smp.terminal == len(f.ids) && s.arrivals(s.duration) == len(f.ids) {
				return nil
			}
		}
		if at >= s.duration {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// readResult reads the jobs, the span from the first call to the last
// result, and each job's time to its first call into res.
func readResult(ctx context.Context, st runStore, kinds map[string]workload.Kind, res *result) error {
	var err error
	if res.jobs, err = readJobs(ctx, st, kinds); err != nil {
		return err
	}
	if res.span, err = st.CallSpan(ctx); err != nil {
		return fmt.Errorf("bench: read span: %w", err)
	}
	res.toCall, res.toCallWarm, err = readToCall(ctx, st)
	return err
}

// startHogs starts n other clients that each keep one call to model in
// flight until ctx is done (pausing 50 ms after a refused call).
func startHogs(ctx context.Context, n int, baseURL, model string) *sync.WaitGroup {
	var wg sync.WaitGroup
	if n == 0 {
		return &wg
	}
	client := worker.NewOpenAIClient(worker.UpstreamConfig{BaseURL: baseURL, APIKey: simAPIKey, Timeout: 30 * time.Second})
	req := openai.ChatCompletionRequest{Model: model, MaxCompletionTokens: hogMaxTokens,
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "Write a long story."}}}
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := client.CreateChatCompletion(ctx, req); err != nil {
					select {
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
		})
	}
	return &wg
}

// jobIngester records the jobs a run feeds: a *store.Queue is one.
type jobIngester interface {
	Ingest(ctx context.Context, jobs []store.NewJob) (created []bool, err error)
}

// runStore is what a run reads of its database: a *store.Jobs is one.
type runStore interface {
	CountEnded(ctx context.Context) (int, error)
	JobOutcomes(ctx context.Context) ([]store.JobOutcome, error)
	CallSpan(ctx context.Context) (time.Duration, error)
	TimesToFirstCall(ctx context.Context) (all, warm []time.Duration, err error)
}

// takeSample reads the terminal jobs, the simulator's 429s and the
// worker's concurrency limit.
func takeSample(ctx context.Context, st runStore, sim *upstreamsim.Server, reg *prometheus.Registry, model string) (sample, error) {
	var s sample
	n, err := st.CountEnded(ctx)
	s.terminal = n
	if err != nil {
		return s, fmt.Errorf("bench: count jobs: %w", err)
	}
	s.rateLimited = total(sim.Stats().Total.RateLimited)
	if mfs, err := reg.Gather(); err == nil {
		for _, mf := range mfs {
			if mf.GetName() != "llmq_concurrency_limit" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetValue() == model {
						s.concurrency = m.GetGauge().GetValue()
					}
				}
			}
		}
	}
	return s, nil
}

// readJobs reads every job's final state.
func readJobs(ctx context.Context, st runStore, kinds map[string]workload.Kind) ([]jobResult, error) {
	outcomes, err := st.JobOutcomes(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: read jobs: %w", err)
	}
	out := make([]jobResult, len(outcomes))
	for i, o := range outcomes {
		out[i] = jobResult{id: o.ID, status: o.Status, usedModel: o.UsedModel, kind: kinds[o.ID], latency: o.Latency}
	}
	return out, nil
}

// database creates an empty database for one run and returns its URL and
// a function that drops it.
func (b *Bench) database(ctx context.Context) (string, func(), error) {
	u, err := url.Parse(b.cfg.PostgresURL)
	if err != nil {
		// url.Error repeats the URL, password included: keep its reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", nil, fmt.Errorf("%w: PostgresURL %s: %w", ErrInvalidConfig, redact.URL(b.cfg.PostgresURL), err)
	}
	name := "llmq_bench_" + uuid.NewString()[:8]
	u.Path = "/" + name
	admin := *u
	admin.Path = "/postgres"
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin.String())
		if err != nil {
			b.log.Warn("bench: drop database", slog.String("database", name), slog.Any("error", err))
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			b.log.Warn("bench: drop database", slog.String("database", name), slog.Any("error", err))
		}
	}
	if _, err := migrations.EnsureDatabase(ctx, u.String()); err != nil {
		return "", nil, fmt.Errorf("bench: create database: %w", err)
	}
	return u.String(), drop, nil
}

func total(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// readToCall reads each called job's time from its record to its first
// call's start, of every job and of those recorded after the first call's
// answer.
func readToCall(ctx context.Context, st runStore) (all, warm []time.Duration, err error) {
	if all, warm, err = st.TimesToFirstCall(ctx); err != nil {
		return nil, nil, fmt.Errorf("bench: read calls: %w", err)
	}
	return all, warm, nil
}
