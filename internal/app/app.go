package app

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	openai "github.com/sashabaranov/go-openai"

	"github.com/llmq/llmq/batchapi"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/app/console"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/internal/redact"
	"github.com/llmq/llmq/internal/retention"
	"github.com/llmq/llmq/internal/tenancy"
	"github.com/llmq/llmq/internal/webhook"
	"github.com/llmq/llmq/migrations"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/worker"
)

// App is one llmq process: the store, the broker, and the components
// Config asks for, built from one configuration and started and stopped as
// one ordered list.
type App struct {
	cfg   Config
	log   *slog.Logger
	clock clockwork.Clock
	// starting is Start's context: a part waiting at start-up for the
	// database gives up when it ends (the parts themselves run on a
	// context without its cancellation).
	starting context.Context
	reg      *prometheus.Registry
	// registerer is what the components register with: reg, and
	// Config.Registerer when set.
	registerer prometheus.Registerer

	migrated []migrations.Migration
	store    *store.Store
	// est counts tokens for the worker's ingest and the producer's outbox.
	est       *shaping.Estimator
	brokerURL string
	target    open.Target
	pub       transport.Publisher
	sub       transport.Subscriber

	letters *dlq.Writer
	// alerter sends dead-letter and budget alerts (nil: no sink).
	alerter  *dlq.Alerter
	worker   *worker.Worker
	producer *producer.Producer
	apiLn    net.Listener
	metLn    net.Listener
	strategy shaping.Strategy
	// routing serves the tenants' routes and webhook secrets
	// (tenantroutes.go).
	routing *tenantRouting
	// tenancy serves the tenants and tenant keys kept as data (tenancy.go).
	tenancy *tenancy.Watcher

	parts    parts
	failed   chan error
	mu       sync.Mutex // guards parts and stopped
	stopped  bool
	stopErr  error
	stopDone chan struct{}
}

// New opens the store and the broker and builds the components cfg asks
// for; nothing runs until Start. When New fails, what it opened is closed.
func New(ctx context.Context, cfg Config) (*App, error) {
	err := cfg.validate()
	if err == nil {
		err = Check(cfg.Settings)
	}
	if err != nil {
		if cfg.API != nil && cfg.API.Listener != nil {
			_ = cfg.API.Listener.Close()
		}
		return nil, err
	}
	a := &App{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()), clock: cfg.Clock, reg: prometheus.NewRegistry(),
		failed: make(chan error, 1), stopDone: make(chan struct{})}
	if a.clock == nil {
		a.clock = clockwork.NewRealClock()
	}
	a.registerer = a.reg
	if cfg.Registerer != nil {
		a.registerer = teeRegisterer{a.reg, cfg.Registerer}
	}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := a.build(ctx); err != nil {
		if cfg.API != nil && cfg.API.Listener != nil && a.apiLn == nil {
			_ = cfg.API.Listener.Close() // handed over, but not yet in the list
		}
		_ = a.parts.stopAll(ctx, a.log)
		return nil, err
	}
	return a, nil
}

// build opens the resources, then builds the components in the order they
// start.
func (a *App) build(ctx context.Context) error {
	if err := a.openResources(ctx); err != nil {
		return err
	}
	if a.tenancy != nil {
		if err := a.startTenancy(ctx); err != nil {
			return err
		}
	}
	if a.cfg.Worker != nil {
		if err := a.checkUpstreams(ctx); err != nil {
			return err
		}
		if err := a.buildWorker(); err != nil {
			return err
		}
	}
	if a.cfg.API != nil || a.cfg.Producer {
		if err := a.buildProducer(); err != nil {
			return err
		}
	}
	if a.cfg.API != nil {
		return a.buildAPI()
	}
	return nil
}

// openResources opens, in order, the store (after the migrations), the
// embedded broker, the publisher and subscriber, and the listeners.
func (a *App) openResources(ctx context.Context) error {
	s := a.cfg.Settings
	if a.cfg.CreateDatabase {
		if _, err := migrations.EnsureDatabase(ctx, s.DatabaseURL); err != nil {
			return fmt.Errorf("create database %s: %w", redact.URL(s.DatabaseURL), err)
		}
	}
	if a.cfg.Worker != nil || a.cfg.API != nil || a.cfg.Producer {
		// One tokenizer for the worker's ingest and the producer's
		// outbox, so a job gets the same size delay on either path (it
		// costs about 40 ms and 10 MB, spared the other commands).
		est, err := shaping.NewEstimator(shaping.EstimatorConfig{})
		if err != nil {
			return err
		}
		a.est = est
	}
	order := storeOrder(s)
	live := a.cfg.Worker != nil || a.cfg.API != nil || a.cfg.Producer
	if live {
		a.tenancy = a.newTenancy()
		order.Live = a.tenancy.Tenants
	}
	st, err := a.openStore(ctx, store.WithOrder(order))
	if err != nil {
		return err
	}
	a.store = st
	a.parts.opened("store", quietly(st.Close))
	if a.cfg.Migrate {
		if a.migrated, err = st.Migrate(ctx); err != nil {
			return fmt.Errorf("migrate %s: %w", redact.URL(s.DatabaseURL), err)
		}
	}

	if err := a.openBroker(ctx); err != nil {
		return err
	}
	return a.openListeners()
}

// openBroker opens the publisher and the subscriber of LLMQ_BROKER (an
// embedded Kafka first when asked) and waits for the broker to answer.
func (a *App) openBroker(ctx context.Context) error {
	s := a.cfg.Settings
	var err error
	a.brokerURL = s.Broker.Raw
	if s.Broker.Kind == config.BrokerEmbedded {
		// An in-process Kafka cluster with the topic and its dead-letter
		// topic seeded.
		topic := s.Broker.Destination()
		addrs, stop, err := kafka.StartEmbedded(ctx, topic, topic+dlq.DLQSuffix)
		if err != nil {
			return err
		}
		a.parts.opened("embedded broker", quietly(stop))
		a.brokerURL = "kafka://" + strings.Join(addrs, ",") + "/" + topic
	}
	if a.target, err = open.Parse(a.brokerURL); err != nil {
		return fmt.Errorf("%s: %w", config.EnvBroker, err)
	}
	// The worker consumes the subscriber; without a worker it is the
	// producer's depth probe, never consumed (it reads the lag of the
	// consumer group the URL names: the workers').
	opts := open.Options{Logger: a.log}
	if a.cfg.Worker != nil {
		// The worker records messages in Postgres and acks them at once:
		// its prefetch bounds the messages being recorded, not the jobs
		// being run.
		opts.Prefetch = worker.IngestPrefetchDefault
	}
	if a.pub, a.sub, err = open.Open(ctx, a.brokerURL, opts); err != nil {
		return err
	}
	a.parts.opened("publisher", closer(a.pub.Close))
	a.parts.opened("subscriber", closer(a.sub.Close))
	return a.waitForBroker(ctx)
}

// openListeners opens the API's listener and the metrics server's.
func (a *App) openListeners() error {
	var err error
	if a.cfg.API != nil {
		ln := a.cfg.API.Listener
		if ln == nil {
			if ln, err = net.Listen("tcp", a.cfg.API.Listen); err != nil {
				return fmt.Errorf("api: listen: %w", err)
			}
		}
		a.apiLn = ln
		a.parts.opened("api listener", closeListener(ln))
	}
	if a.cfg.MetricsListen != "" {
		ln, err := net.Listen("tcp", a.cfg.MetricsListen)
		if err != nil {
			return fmt.Errorf("--metrics-listen %s: %w", a.cfg.MetricsListen, err)
		}
		a.metLn = ln
		a.parts.opened("metrics listener", closeListener(ln))
		a.addServer("metrics", ln, &http.Server{Handler: a.metricsHandler(), ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute}, metricsStopTimeout)
	}
	return nil
}

// buildWorker builds the alerter, the dead-letter writer, the upstream
// client, the batch lane, the worker and the pruner.
func (a *App) buildWorker() error {
	s, wc := a.cfg.Settings, a.cfg.Worker
	strategy := wc.Strategy
	if strategy == "" {
		var err error
		if strategy, err = shaping.ParseStrategy(s.Strategy); err != nil {
			return fmt.Errorf("strategy: %w", err)
		}
	}
	a.strategy = strategy
	if len(s.Models) == 0 && !s.AllowAnyModel {
		a.log.Warn("the configuration names no model: jobs may name any model, each with unknown quotas; " +
			"list the models to run under models: (or set allow_any_model: true to say so)")
	}
	letters, err := a.deadLetters()
	if err != nil {
		return err
	}

	client := worker.NewOpenAIClient(upstreamConfig(s, wc))
	wcfg := workerConfig(s, wc)
	wcfg.Subscriber, wcfg.Store, wcfg.DeadLetters, wcfg.Ledger, wcfg.Queued = a.sub, a.store.Queue(), letters, a.store.Ledger(), a.store.Queue()
	wcfg.Upstream = worker.OpenAIUpstream(client, cmp.Or(wc.Provider, worker.ProviderOpenAI))
	wcfg.Strategy, wcfg.Logger, wcfg.Registerer = strategy, a.log, a.registerer
	wcfg.Budgets, wcfg.Chunks, wcfg.LaneRates = a.store.Budgets(), a.store.Streams(), a.store.LaneRates()
	wcfg.LiveTenants = a.tenancy.Tenants
	wcfg.Estimator = a.est
	if a.alerter != nil {
		wcfg.BudgetAlerts = a.alerter
	}
	if !wc.NoBatchLane {
		// The batch lane: deferrable jobs go to the provider's Batch API
		// off-peak, or when the live lane would take too long to drain.
		bc := batchConfig(s, wc)
		bc.Store, bc.Client = a.store.Batches(), newBatchClient(s, cmp.Or(wc.UpstreamTimeout, worker.UpstreamTimeoutDefault))
		bc.DeadLetters, bc.Logger, bc.Registerer = letters, a.log, a.registerer
		bc.Drain = wc.BatchDrain
		if bc.Drain == nil {
			bc.Drain = func() time.Duration { return a.worker.Drain() }
		}
		router, err := batchapi.NewRouter(bc)
		if err != nil {
			return err
		}
		batches, err := batchapi.New(bc)
		if err != nil {
			return err
		}
		a.parts.add("batch lane", a.waitingForDatabase("batch lane", batches.Start), batches.Stop, batchStopTimeout)
		wcfg.Router = batchRouter{r: router, drain: wc.BatchDrain}
	}
	routing, err := a.tenantRoutes()
	if err != nil {
		return err
	}
	wcfg.TenantReplies = routing.routes
	if wcfg.Routed, err = a.addNotifier(s, routing.hooks); err != nil {
		return err
	}
	if a.worker, err = worker.New(wcfg); err != nil {
		return err
	}
	// Every worker prunes what retention lets go; several share the work.
	rc := retentionConfig(s)
	rc.Store, rc.Logger, rc.Registerer = a.store, a.log, a.registerer
	pruner, err := retention.New(rc)
	if err != nil {
		return err
	}
	a.parts.add("retention", pruner.Start, pruner.Stop, stopTimeout)
	// The worker's Stop bounds itself (its ShutdownTimeout).
	a.parts.add("worker", a.startWorker, a.stopWorker, 0)
	return nil
}

// addNotifier adds the notifier, which publishes the result events of jobs
// with a route after their commit, and posts their webhooks with hooks
// (docs/design/notifications.md); it returns its Wake, which the worker
// calls when it ends a job with a route.
func (a *App) addNotifier(s *config.Config, hooks *webhook.Sender) (func(), error) {
	nc := worker.NotifierConfig{Outbox: a.store.Notifications(), RetryFor: s.Notifications.RetryFor,
		Webhooks: hooks, Log: a.log, Registerer: a.registerer}
	if r, ok := a.pub.(transport.Replier); ok {
		nc.Replier = r
	}
	notifier, err := worker.NewNotifier(nc)
	if err != nil {
		return nil, err
	}
	a.parts.add("notifier", notifier.Start, notifier.Stop, stopTimeout)
	return notifier.Wake, nil
}

// batchRouter is the batch lane's routing policy as the worker asks it,
// with the drain estimate of WorkerConfig.BatchDrain when one is given.
type batchRouter struct {
	r     *batchapi.Router
	drain func() time.Duration
}

func (b batchRouter) Hold(now time.Time, drain time.Duration) worker.BatchHold {
	if b.drain != nil {
		drain = b.drain()
	}
	h := b.r.Hold(now, drain)
	return worker.BatchHold{Hold: h.Batch, DeadlineAfter: h.DeadlineAfter, LiveReason: h.LiveReason}
}

func (a *App) startWorker(ctx context.Context) error {
	if err := a.worker.Start(ctx); err != nil {
		return err
	}
	a.log.Info("worker started", slog.String("broker", a.target.Kind+"/"+a.target.Dest),
		slog.String("strategy", strategyInForce(a.cfg.Settings, a.strategy)), slog.String("upstream", redact.URL(a.cfg.Settings.OpenAIBaseURL)))
	return nil
}

func (a *App) stopWorker(ctx context.Context) error {
	err := a.worker.Stop(ctx)
	n := a.worker.HandedBack()
	msg := fmt.Sprintf("worker stopped: %d jobs handed back to the queue", n)
	if n == 1 {
		msg = "worker stopped: 1 job handed back to the queue"
	}
	a.log.Info(msg, slog.Int64("handed_back", n))
	return err
}

// strategyInForce names the shaping strategy of the worker's lanes: the
// one configured, else shape for each model with a quota and adaptive for
// the others (shaping.DefaultStrategy; a pool entry's own limits may
// differ).
func strategyInForce(s *config.Config, st shaping.Strategy) string {
	if st != "" {
		return string(st)
	}
	var shape, adaptive []string
	for _, name := range slices.Sorted(maps.Keys(s.Models)) {
		if m := s.Models[name]; shaping.DefaultStrategy(m.RPM, m.TPM) == shaping.StrategyShape {
			shape = append(shape, name)
		} else {
			adaptive = append(adaptive, name)
		}
	}
	if len(s.Models) == 0 || s.AllowAnyModel {
		adaptive = append(adaptive, "models not listed")
	}
	switch {
	case len(adaptive) == 0:
		return string(shaping.StrategyShape)
	case len(shape) == 0:
		return string(shaping.StrategyAdaptive)
	}
	return fmt.Sprintf("shape for %s; adaptive for %s", strings.Join(shape, ", "), strings.Join(adaptive, ", "))
}

// deadLetters returns the process's one dead-letter writer (and its
// alerter, when a sink is configured), building it on first use: the worker
// and the producer's outbox sweeper share it.
func (a *App) deadLetters() (*dlq.Writer, error) {
	if a.letters != nil {
		return a.letters, nil
	}
	s := a.cfg.Settings
	var notifier dlq.Notifier
	if ac, ok := alertConfig(s); ok {
		ac.Logger, ac.Registerer = a.log, a.registerer
		alerter, err := dlq.NewAlerter(ac)
		if err != nil {
			return nil, err
		}
		a.parts.add("alerter", alerter.Start, alerter.Stop, stopTimeout)
		notifier, a.alerter = alerter, alerter
	}
	letters, err := dlq.NewWriter(dlq.Config{
		Store: a.store.DeadLetters(), Publisher: a.pub, Destination: a.target.Dest, Alerter: notifier,
		Logger: a.log, Registerer: a.registerer,
	})
	if err != nil {
		return nil, err
	}
	a.parts.add("dead-letter writer", letters.Start, letters.Stop, stopTimeout)
	a.letters = letters
	return letters, nil
}

// buildProducer builds the producer, whose depth probe is the subscriber.
func (a *App) buildProducer() error {
	pc := producerConfig(a.cfg.Settings)
	pc.Publisher, pc.Store, pc.Destination, pc.DepthProbe = a.pub, a.store.Outbox(), a.target.Dest, a.sub
	pc.KeyBy = producer.KeyBy(a.target.Key)
	letters, err := a.deadLetters()
	if err != nil {
		return err
	}
	pc.DeadLetters = letters
	pc.QuotaRatePerMin = 60 * worker.QuotaRate(a.cfg.Settings.Catalog(), nil)
	// A deadline is checked against the job's own model lane
	// (docs/design/gateway.md), not the queue's drain.
	pc.Predict = a.store.LaneRates().JobPredictor(a.cfg.Settings.Tenants)
	pc.Sizer = jobSizer(a.cfg.Settings, a.est)
	pc.Logger = a.log
	pc.LiveTenants = a.tenancy.Tenants
	routing, err := a.tenantRoutes()
	if err != nil {
		return err
	}
	pc.TenantReplies, pc.ResultsTopic = routing.routes.TenantReply, a.cfg.Settings.Notifications.ResultsTopic
	// The worker exports its own llmq_queue_depth: a process with both
	// exports the worker's (the two gauges share a name, not a help text).
	if a.worker == nil {
		pc.Registerer = a.registerer
	}
	p, err := producer.New(pc)
	if err != nil {
		return err
	}
	a.producer = p
	// Stopped after the API and the sweeper: a measurement of the queue
	// the API started ends before the store closes.
	a.parts.add("producer", nil, p.Drain, stopTimeout)
	return nil
}

// buildAPI builds the outbox sweeper, the dead-letter service, the HTTP
// API on the producer and the web console over the API.
func (a *App) buildAPI() error {
	s, ac := a.cfg.Settings, a.cfg.API
	sweeper, err := producer.NewSweeper(producer.SweeperConfig{Producer: a.producer, Interval: ac.SweepInterval, Grace: ac.SweepGrace})
	if err != nil {
		return err
	}
	a.parts.add("outbox sweeper", sweeper.Start, sweeper.Stop, stopTimeout)
	svc, err := dlq.NewService(dlq.Config{Store: a.store.DeadLetters(), Publisher: a.pub, Destination: a.target.Dest,
		Logger: a.log, Registerer: a.registerer})
	if err != nil {
		return err
	}
	// Cancelling a provider batch asks the provider: the upstream's
	// Batch API, with the worker's address and key.
	batchClient := newBatchClient(s, time.Minute)
	handler, err := api.New(api.Config{
		Producer: a.producer, Store: a.store.Jobs(), OperatorKeys: operatorKeys(s.OperatorKeys), Catalog: s.Catalog(),
		DeadLetterService: svc, Batches: a.store.Batches(), Notifications: a.store.Notifications(),
		Usage: a.store.Budgets(), Tenancy: a.tenancy, TenancyStore: a.store.Tenancy().AnyModel(s.AllowAnyModel),
		TenantNotifications: store.NewTenantNotifications(a.store),
		CancelBatch: func(ctx context.Context, ref string) (*store.BatchRecord, error) {
			return batchapi.Cancel(ctx, a.store.Batches(), batchClient, ref)
		},
		MaxMessageBytes: s.MaxMessageBytes, Logger: a.log, Registerer: a.registerer,
		JobsDone: a.store.Jobs(), Streams: a.store.Streams(), Gateway: gatewayConfig(s), RateLimits: rateLimitConfig(s), Limits: a.store.Ledger(),
	})
	if err != nil {
		return err
	}
	// Gateway mode's listening connection, before the server takes calls.
	a.parts.add("gateway listener", handler.Start, handler.Stop, stopTimeout)
	if len(s.APIKeys) == 0 && len(s.OperatorKeys) == 0 {
		a.log.Warn("no API keys configured (LLMQ_API_KEYS or api_keys, LLMQ_OPERATOR_KEYS or operator_keys): every /v1 request will be refused")
	}
	ui, err := console.New(console.Config{API: handler, Secret: s.ConsoleSecret, Secure: ac.ConsoleSecureCookies,
		Refresh: ac.ConsoleRefresh, Logger: a.log})
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           withConsole(handler, ui),
		ReadHeaderTimeout: timeout(ac.ReadHeaderTimeout, APIReadHeaderTimeoutDefault),
		ReadTimeout:       timeout(ac.ReadTimeout, APIReadTimeoutDefault),
		WriteTimeout:      timeout(ac.WriteTimeout, APIWriteTimeoutDefault),
		IdleTimeout:       timeout(ac.IdleTimeout, APIIdleTimeoutDefault),
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}
	ln, scheme := a.apiLn, "http"
	if ac.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(ac.TLSCert, ac.TLSKey)
		if err != nil {
			return fmt.Errorf("api: TLS certificate %s and key %s: %w", ac.TLSCert, ac.TLSKey, err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		ln, scheme = tls.NewListener(ln, srv.TLSConfig), "https"
	}
	a.addServer("api", ln, srv, apiStopTimeout, slog.String("scheme", scheme),
		slog.String("broker", a.brokerName()), slog.String("destination", a.target.Dest))
	return nil
}

// withConsole serves the console at console.Prefix and below, the API
// everywhere else.
func withConsole(apiHandler, ui http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p == console.Prefix || strings.HasPrefix(p, console.Prefix+"/") {
			ui.ServeHTTP(w, r)
			return
		}
		apiHandler.ServeHTTP(w, r)
	})
}

// addServer adds srv on ln: Start serves, Stop shuts it down. A server
// that fails ends Run.
func (a *App) addServer(name string, ln net.Listener, srv *http.Server, timeout time.Duration, attrs ...any) {
	served := make(chan struct{})
	start := func(context.Context) error {
		go func() {
			defer close(served)
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error(name+" server", slog.Any("error", err))
				select {
				case a.failed <- fmt.Errorf("%s: serve: %w", name, err):
				default:
				}
			}
		}()
		a.log.Info(name+" listening", append([]any{slog.String("addr", ln.Addr().String())}, attrs...)...)
		return nil
	}
	stop := func(ctx context.Context) error {
		err := srv.Shutdown(ctx)
		<-served
		return err
	}
	a.parts.add(name+" server", start, stop, timeout)
}

// brokerName names the broker in logs, without credentials.
func (a *App) brokerName() string {
	if a.cfg.Settings.Broker.Kind == config.BrokerEmbedded {
		return "embedded " + a.brokerURL
	}
	return a.cfg.Settings.Broker.String()
}

// metricsHandler serves /metrics and /healthz (the process is up: the
// liveness probe of a worker, which has no other port).
func (a *App) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	// OpenMetrics when the scraper asks for it: the only format that
	// carries the histograms' exemplars (trace ids, docs/design/tracing.md).
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg, EnableOpenMetrics: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	return mux
}

// closeListener closes ln unless a server's shutdown already did.
func closeListener(ln net.Listener) func(context.Context) error {
	return func(context.Context) error {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	}
}

// Start starts the components in order: alerts, dead-letter writer, batch
// lane, worker, outbox sweeper, API; the metrics endpoint first of all. The
// components run until Stop, whatever becomes of ctx (only its values are
// kept). When a component fails to start, Start returns its error; call
// Stop to stop the ones that started.
func (a *App) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return errors.New("app: Start after Stop")
	}
	a.starting = ctx
	return a.parts.startAll(context.WithoutCancel(ctx))
}

// Stop stops the components last to first, each within its budget and on
// a context that ctx's cancellation does not end (final writes complete),
// then closes the broker and the store. It may be called more than once;
// every call returns the first one's result.
func (a *App) Stop(ctx context.Context) error {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		<-a.stopDone
		return a.stopErr
	}
	a.stopped = true
	a.mu.Unlock()
	a.log.Info("shutting down")
	a.stopErr = a.parts.stopAll(ctx, a.log)
	close(a.stopDone)
	return a.stopErr
}

// Run starts the app, waits until ctx is done or a server fails, and stops
// it.
func (a *App) Run(ctx context.Context) error {
	if err := a.Start(ctx); err != nil {
		return errors.Join(err, a.Stop(ctx))
	}
	var failed error
	select {
	case <-ctx.Done():
	case failed = <-a.failed:
	}
	return errors.Join(failed, a.Stop(ctx))
}

// Store is the job store.
func (a *App) Store() *store.Store { return a.store }

// Publisher publishes to the broker (the demo sends malformed messages
// through it, the benchmark its load).
func (a *App) Publisher() transport.Publisher { return a.pub }

// Broker is the broker URL opened (for "embedded", the in-process
// cluster's) and its parsed form.
func (a *App) Broker() (url string, target open.Target) { return a.brokerURL, a.target }

// Registry holds every component's metrics.
func (a *App) Registry() *prometheus.Registry { return a.reg }

// Migrated lists the migrations New applied.
func (a *App) Migrated() []migrations.Migration { return a.migrated }

// Worker is the worker; nil without Config.Worker.
func (a *App) Worker() *worker.Worker { return a.worker }

// Producer is the producer; nil without Config.API or Config.Producer.
func (a *App) Producer() *producer.Producer { return a.producer }

// MetricsAddr is the address of /metrics and /healthz; nil without
// Config.MetricsListen.
func (a *App) MetricsAddr() net.Addr {
	if a.metLn == nil {
		return nil
	}
	return a.metLn.Addr()
}

// APIAddr is the address the API listens on; nil without Config.API.
func (a *App) APIAddr() net.Addr {
	if a.apiLn == nil {
		return nil
	}
	return a.apiLn.Addr()
}

// teeRegisterer registers every collector with both registerers.
type teeRegisterer [2]prometheus.Registerer

func (t teeRegisterer) Register(c prometheus.Collector) error {
	if err := t[0].Register(c); err != nil {
		return err
	}
	return t[1].Register(c)
}

func (t teeRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t teeRegisterer) Unregister(c prometheus.Collector) bool {
	a := t[0].Unregister(c)
	b := t[1].Unregister(c)
	return a || b
}

// newBatchClient is a client of the upstream's Batch and Files API, its
// answers bounded (batchapi.NewClient), each call bounded by timeout.
func newBatchClient(s *config.Config, timeout time.Duration) *openai.Client {
	cc := openai.DefaultConfig(s.OpenAIAPIKey)
	cc.BaseURL = s.OpenAIBaseURL
	cc.HTTPClient = &http.Client{Timeout: timeout}
	return batchapi.NewClient(cc, 0)
}
