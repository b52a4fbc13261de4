package demo

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/batchapi"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/internal/workload"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
)

// Settings of the pipeline the demo builds.
const (
	simAPIKey       = "sk-llmq-local"
	maxInFlight     = 256
	maxAttempts     = 8
	publishChunk    = 100
	shutdownTimeout = 10 * time.Second
	// concurrency is each model's calls in flight: the simulator's latency
	// does not grow with them, and shape's default (16) held the demo's
	// 180 live jobs to 16 a round trip.
	concurrency = maxInFlight
)

// simConfig is the simulated provider: the demo model and its fallback
// with their quotas, 100 ms to the first token and 1 ms per token, 2% of
// calls failing with a retryable 500 or 503, and a Batch API running 100
// times faster than real time.
func simConfig(c Config) upstreamsim.Config {
	return upstreamsim.Config{
		Models: map[string]upstreamsim.ModelConfig{
			ModelDefault:         {Limits: upstreamsim.Limits{RPM: int64(c.RPM), TPM: int64(c.TPM)}},
			FallbackModelDefault: {Limits: upstreamsim.Limits{RPM: FallbackRPM, TPM: FallbackTPM}},
		},
		Latency: upstreamsim.LatencyConfig{TTFT: 100 * time.Millisecond, PerToken: time.Millisecond},
		Faults: upstreamsim.FaultConfig{Rates: map[upstreamsim.FaultKind]float64{
			upstreamsim.FaultServerError: FaultRate / 2, upstreamsim.FaultOverloaded: FaultRate / 2,
		}},
		Batch: upstreamsim.BatchConfig{TimeScale: 100},
		Seed:  1,
	}
}

// run is one demo run: what it started and what it enqueued.
type run struct {
	cfg     Config
	log     *slog.Logger
	sim     *upstreamsim.Server
	app     *app.App
	apiURL  string
	good    []string
	bad     []string
	started time.Time
}

// Run runs the demo: it starts the pipeline, enqueues the jobs, shows
// progress on Config.Out until every job reached a terminal state, prints
// the summary and returns it. With KeepRunning it then serves until ctx is
// done. Every component it started is stopped before it returns.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Summary{}, err
	}
	r := &run{cfg: cfg, log: cfg.Logger}
	defer r.stop(ctx)
	if err := r.start(ctx); err != nil {
		return Summary{}, err
	}
	if err := r.enqueue(ctx); err != nil {
		return Summary{}, err
	}
	if err := r.wait(ctx); err != nil {
		return Summary{}, err
	}
	sum, err := r.summary(ctx)
	if err != nil {
		return Summary{}, err
	}
	sum.Print(cfg.Out, cfg.KeepRunning)
	if cfg.KeepRunning {
		<-ctx.Done()
	}
	return sum, nil
}

// stop stops the pipeline, then the simulator.
func (r *run) stop(ctx context.Context) {
	if r.app != nil {
		_ = r.app.Stop(ctx) // the app logs each failure
	}
	if r.sim != nil {
		if err := app.StopWithin(ctx, r.sim.Stop, shutdownTimeout); err != nil {
			r.log.Warn("demo: stop simulator", slog.Any("error", err))
		}
	}
}

// settings is the configuration of the demo's pipeline: the simulator as
// upstream, the demo model and its fallback with their quotas and prices,
// a patient retry policy, the Batch API lane without an off-peak window
// (only the drain rule routes jobs there), the demo's API key and its
// operator key (for the console).
func settings(cfg Config, simRoot string) (*config.Config, error) {
	broker, err := config.ParseBroker(cmp.Or(cfg.Broker, string(config.BrokerEmbedded)))
	if err != nil {
		return nil, fmt.Errorf("demo: broker: %w", err)
	}
	return &config.Config{
		DatabaseURL: cfg.DatabaseURL, Broker: broker,
		OpenAIBaseURL: simRoot + "/v1", OpenAIAPIKey: simAPIKey,
		Strategy: string(shaping.StrategyShape),
		Models: map[string]llmq.Model{
			ModelDefault: {RPM: float64(cfg.RPM), TPM: float64(cfg.TPM), Concurrency: concurrency, Fallbacks: []string{FallbackModelDefault},
				InputPricePer1M: upstreamsim.InputPerMTokDefault, OutputPricePer1M: upstreamsim.OutputPerMTokDefault},
			FallbackModelDefault: {RPM: FallbackRPM, TPM: FallbackTPM, Concurrency: concurrency,
				InputPricePer1M: upstreamsim.InputPerMTokDefault, OutputPricePer1M: upstreamsim.OutputPerMTokDefault},
		},
		Retry:        config.Retry{MaxAttempts: maxAttempts, BaseDelay: 250 * time.Millisecond, MaxDelay: 5 * time.Second},
		Batch:        config.Batch{Window: batchapi.WindowOff, FlushInterval: 2 * time.Second},
		APIKeys:      map[string]string{APIKeyDefault: TenantDefault},
		OperatorKeys: []config.OperatorKey{{Name: "demo", Key: OperatorKeyDefault}},
	}, nil
}

// start brings up the simulator, then the pipeline: broker, database,
// worker and API.
func (r *run) start(ctx context.Context) error {
	cfg, out := r.cfg, r.cfg.Out
	sim, err := upstreamsim.New(simConfig(cfg), upstreamsim.WithLogger(r.log))
	if err != nil {
		return err
	}
	root, err := sim.Start(ctx, "127.0.0.1:0")
	if err != nil {
		return err
	}
	r.sim = sim
	fmt.Fprintf(out, "upstream   simulator at %s/v1: %s %d RPM / %s TPM (fallback %s), 2%% faults\n",
		root, ModelDefault, cfg.RPM, kilo(float64(cfg.TPM)), FallbackModelDefault)

	s, err := settings(cfg, root)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if errors.Is(err, syscall.EADDRINUSE) && cfg.Listen == ListenDefault {
		// Another program has the default port: any free one will do.
		ln, err = lc.Listen(ctx, "tcp", "127.0.0.1:0")
	}
	if err != nil {
		return fmt.Errorf("demo: API listen %s: %w", cfg.Listen, err)
	}
	a, err := app.New(ctx, app.Config{
		Settings: s, Migrate: true, CreateDatabase: true, Logger: r.log,
		Worker: &app.WorkerConfig{
			MaxInFlight: maxInFlight, ShutdownTimeout: shutdownTimeout, UpstreamTimeout: 30 * time.Second,
			// The demo treats the live lane as backed up (Drain above the
			// threshold), so every deferrable job takes the Batch API lane.
			BatchDrain: func() time.Duration { return time.Hour }, BatchPollInterval: time.Second,
		},
		API: &app.APIConfig{Listener: ln},
	})
	if err != nil {
		return err
	}
	r.app = a
	brokerURL, target := a.Broker()
	if s.Broker.Kind == config.BrokerEmbedded {
		fmt.Fprintf(out, "broker     embedded Kafka (kfake) at %s\n", strings.Join(target.Brokers, ","))
	} else {
		fmt.Fprintf(out, "broker     %s\n", redact.URL(brokerURL))
	}
	fmt.Fprintf(out, "database   %s (%d migrations applied)\n", redact.URL(cfg.DatabaseURL), len(a.Migrated()))
	if err := a.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "worker     strategy shape, %d messages in flight at most, %d attempts per job\n", maxInFlight, maxAttempts)
	r.apiURL = "http://" + a.APIAddr().String()
	fmt.Fprintf(out, "api        %s (API key %s)\n", r.apiURL, APIKeyDefault)
	fmt.Fprintf(out, "console    %s/ui (sign in with the operator key %s)\n\n", r.apiURL, OperatorKeyDefault)
	return nil
}

// enqueue posts the valid jobs to the API in chunks and publishes the
// malformed messages straight to the broker (the API would refuse them).
func (r *run) enqueue(ctx context.Context) error {
	cfg := r.cfg
	runID := uuid.NewString()[:8]
	mix := workload.Mix{LongEvery: LongEvery, DeferrableEvery: DeferrableEvery, Priorities: true}
	sizes := workload.Sizes{LongPromptWords: LongPromptWords, LongMaxTokens: LongMaxTokens}
	r.started = time.Now()
	msgs := make([]transport.Message, cfg.Malformed)
	for i := range msgs {
		id := fmt.Sprintf("demo-%s-bad-%d", runID, i)
		r.bad = append(r.bad, id)
		msgs[i] = transport.Message{Key: []byte(id), Value: workload.Malformed(id, i)}
	}
	if len(msgs) > 0 {
		_, target := r.app.Broker()
		if err := r.app.Publisher().Publish(ctx, target.Dest, msgs...); err != nil {
			return fmt.Errorf("demo: publish malformed messages: %w", err)
		}
	}
	for from := 0; from < cfg.Jobs; from += publishChunk {
		var batch struct {
			Jobs []*llmq.Job `json:"jobs"`
		}
		for n := from; n < min(from+publishChunk, cfg.Jobs); n++ {
			id := fmt.Sprintf("demo-%s-%04d", runID, n)
			j := mix.Job(sizes, id, TenantDefault, ModelDefault, n)
			j.Metadata = map[string]string{"kind": string(mix.Kind(n))}
			batch.Jobs = append(batch.Jobs, j)
			r.good = append(r.good, id)
		}
		if err := r.post(ctx, batch); err != nil {
			return err
		}
	}
	fmt.Fprintf(r.cfg.Out, "enqueued   %d jobs through POST /v1/jobs (1 in %d long, 1 in %d deferrable, all priorities) + %d malformed messages straight to the broker\n\n",
		cfg.Jobs, LongEvery, DeferrableEvery, cfg.Malformed)
	return nil
}

// post sends one batch of jobs to the API.
func (r *run) post(ctx context.Context, batch any) error {
	body, err := json.Marshal(batch)
	if err != nil {
		return fmt.Errorf("demo: encode jobs: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.apiURL+"/v1/jobs", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("demo: post jobs: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+APIKeyDefault)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("demo: post jobs: %w", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("demo: post jobs: %s: %s", resp.Status, bytes.TrimSpace(data))
	}
	var got struct {
		Jobs []struct {
			ID    string          `json:"id"`
			Error json.RawMessage `json:"error"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		return fmt.Errorf("demo: post jobs: read answer: %w", err)
	}
	for _, j := range got.Jobs {
		if len(j.Error) > 0 {
			return fmt.Errorf("demo: job %s refused: %s", j.ID, j.Error)
		}
	}
	return nil
}

// wait shows progress until every job is terminal and every malformed
// message is dead-lettered.
func (r *run) wait(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	tick := time.NewTicker(min(r.cfg.ProgressEvery, 250*time.Millisecond))
	defer tick.Stop()
	var lastShown time.Time
	for {
		c, err := r.count(ctx)
		if err != nil {
			return err
		}
		done := c.terminal() == len(r.good) && c.poison == len(r.bad)
		if now := time.Now(); done || now.Sub(lastShown) >= r.cfg.ProgressEvery {
			lastShown = now
			r.progress(c, done)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%w: %d of %d jobs terminal after %s", ErrTimeout, c.terminal(), len(r.good), r.cfg.Timeout)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// counts are the states of the run's jobs, read from Postgres.
type counts struct {
	byStatus    map[llmq.Status]int
	viaBatch    int
	viaFallback int
	poison      int
}

func (c counts) terminal() int {
	n := 0
	for s, k := range c.byStatus {
		if s.Terminal() {
			n += k
		}
	}
	return n
}

// runStore is what a run reads of the store: a *store.Jobs is one.
type runStore interface {
	TallyJobs(ctx context.Context, tenant string, ids []string) ([]store.JobTally, error)
	CountDeadLetteredJobs(ctx context.Context, ids []string, reason string) (int, error)
	SucceededJobs(ctx context.Context, ids []string) ([]store.SucceededJob, error)
}

// count reads the run's jobs by key (jobs_pkey: one lookup per job, 3 ms
// for the default 200 with 1,000,000 other jobs queued); by id alone it
// walked an index of every job, 0.4-0.55 s a tick (docs/bench/million/sql.md).
func (r *run) count(ctx context.Context) (counts, error) {
	c := counts{byStatus: map[llmq.Status]int{}}
	var st runStore = r.app.Store().Jobs()
	tallies, err := st.TallyJobs(ctx, TenantDefault, r.good)
	if err != nil {
		return c, fmt.Errorf("demo: count jobs: %w", err)
	}
	for _, t := range tallies {
		c.byStatus[t.Status] += t.N
		if t.Batch {
			c.viaBatch += t.N
		}
		if t.Fallback && t.Status == llmq.StatusSucceeded {
			c.viaFallback += t.N
		}
	}
	c.poison, err = st.CountDeadLetteredJobs(ctx, r.bad, string(dlq.ReasonPoison))
	if err != nil {
		return c, fmt.Errorf("demo: count dead letters: %w", err)
	}
	return c, nil
}

// progress prints one progress line.
func (r *run) progress(c counts, final bool) {
	st := r.sim.Stats()
	m := st.Models[ModelDefault]
	now := time.Now()
	var req, tok int64
	for _, p := range m.Timeline {
		if now.Unix()-p.Second < 60 {
			req += p.Requests
			tok += p.Tokens
		}
	}
	line := fmt.Sprintf("[%3.0fs] done %d/%d  ok %d (batch %d)  dead letters %d  |  last 60s %s: %d/%d req, %s/%s tok  |  429s %d  retries %d",
		now.Sub(r.started).Seconds(), c.terminal()+c.poison, len(r.good)+len(r.bad),
		c.byStatus[llmq.StatusSucceeded], c.viaBatch, c.byStatus[llmq.StatusDeadLettered]+c.poison,
		ModelDefault, req, r.cfg.RPM, kilo(float64(tok)), kilo(float64(r.cfg.TPM)),
		sum(st.Total.RateLimited), r.retries())
	switch {
	case !r.cfg.TTY:
		fmt.Fprintln(r.cfg.Out, line)
	case final:
		fmt.Fprintf(r.cfg.Out, "\r\033[K%s\n", line)
	default:
		fmt.Fprintf(r.cfg.Out, "\r\033[K%s", line)
	}
}

// retries reads the worker's retry counter.
func (r *run) retries() int64 {
	mfs, err := r.app.Registry().Gather()
	if err != nil {
		return 0
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "llmq_retries_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return int64(n)
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// kilo formats n as 12.3k above a thousand.
func kilo(n float64) string {
	if n >= 1000 {
		return fmt.Sprintf("%.1fk", n/1000)
	}
	return fmt.Sprintf("%.0f", n)
}
