package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/batchapi"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/migrations"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/worker"
)

func init() { register(newWorkerCmd) }

// workerFlags are the worker's own flags; the common ones come from config.
type workerFlags struct {
	strategy        string
	rpm, tpm        int
	concurrency     int
	maxInFlight     int
	metricsListen   string
	shutdownTimeout time.Duration
	provider        string
	dashScopeWait   time.Duration
	upstreamTimeout time.Duration
	lease           time.Duration
}

func newWorkerCmd() *cobra.Command {
	var wf workerFlags
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Consume jobs from the broker and call the LLM at the shaped rate",
		Long: `worker consumes jobs from Kafka or RabbitMQ, shapes calls to the upstream's RPM, TPM and
concurrency limits, retries and falls back on rate limits, stores every result in Postgres,
and dead-letters what cannot succeed. SIGTERM or SIGINT stops fetching, lets in-flight jobs
finish within --shutdown-timeout and leaves the rest for redelivery.`,
		Args: cobra.NoArgs,
	}
	flags := config.BindFlags(cmd)
	fs := cmd.Flags()
	fs.StringVar(&wf.strategy, "strategy", "", "shaping strategy: retry, rpm, shape or adaptive (default: config file, else shape when quotas are known, adaptive when not)")
	fs.IntVar(&wf.rpm, "rpm", 0, "requests per minute of every model the config file does not list (0: unknown)")
	fs.IntVar(&wf.tpm, "tpm", 0, "tokens per minute of every model the config file does not list (0: unknown)")
	fs.IntVar(&wf.concurrency, "concurrency", 0, "calls in flight per model the config file does not list (0: shaping default, 16)")
	fs.IntVar(&wf.maxInFlight, "max-in-flight", worker.MaxInFlightDefault, "messages held at once (waiting, calling or backing off)")
	fs.StringVar(&wf.metricsListen, "metrics-listen", ":9090", "address of the Prometheus /metrics endpoint (empty: none)")
	fs.DurationVar(&wf.shutdownTimeout, "shutdown-timeout", worker.ShutdownTimeoutDefault, "how long in-flight jobs may finish after SIGTERM")
	fs.StringVar(&wf.provider, "provider", string(worker.ProviderOpenAI), "upstream error dialect: openai or dashscope")
	fs.DurationVar(&wf.dashScopeWait, "dashscope-wait-timeout", 0, "send X-DashScope-Wait-Timeout and add it to the client timeout (0: off)")
	fs.DurationVar(&wf.upstreamTimeout, "upstream-timeout", worker.UpstreamTimeoutDefault, "timeout of one upstream call")
	fs.DurationVar(&wf.lease, "lease", worker.LeaseDefault, "how long a claimed job is kept from other workers (a crashed worker's jobs wait this long)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := flags.Load()
		if err != nil {
			return err
		}
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		return runWorker(cmd.Context(), cfg, wf, logger)
	}
	return cmd
}

// runWorker wires the worker from cfg and runs it until ctx is done.
func runWorker(ctx context.Context, cfg *config.Config, wf workerFlags, logger *slog.Logger) error {
	strategy, err := shaping.ParseStrategy(cmp.Or(wf.strategy, cfg.Strategy))
	if err != nil {
		return fmt.Errorf("--strategy: %w", err)
	}
	if _, err := migrations.Up(ctx, cfg.DatabaseURL); err != nil {
		return fmt.Errorf("migrate %s: %w", cfg.DatabaseURL, err)
	}
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	brokerURL, stopBroker, err := brokerURL(ctx, cfg)
	if err != nil {
		return err
	}
	defer stopBroker()
	target, err := open.Parse(brokerURL)
	if err != nil {
		return fmt.Errorf("%s: %w", config.EnvBroker, err)
	}
	pub, sub, err := open.Open(ctx, brokerURL, open.Options{Prefetch: wf.maxInFlight, Logger: logger})
	if err != nil {
		return err
	}
	defer pub.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	alerter, err := newAlerter(cfg, logger, reg)
	if err != nil {
		return err
	}
	var notifier dlq.Notifier
	if alerter != nil {
		if err := alerter.Start(ctx); err != nil {
			return err
		}
		defer stopWithin(alerter.Stop, 10*time.Second)
		notifier = alerter
	}
	letters, err := dlq.NewWriter(dlq.Config{
		Store: st, Publisher: pub, Destination: target.Dest, Alerter: notifier, Logger: logger, Registerer: reg,
	})
	if err != nil {
		return err
	}
	if err := letters.Start(ctx); err != nil {
		return err
	}
	defer stopWithin(letters.Stop, 10*time.Second)

	provider, err := worker.ParseProvider(wf.provider)
	if err != nil {
		return err
	}
	client := worker.NewOpenAIClient(worker.UpstreamConfig{
		BaseURL: cfg.OpenAIBaseURL, APIKey: cfg.OpenAIAPIKey, Timeout: wf.upstreamTimeout,
		DashScopeWaitTimeout: wf.dashScopeWait,
	})
	// The batch lane: deferrable jobs go to the provider's Batch API off-peak
	// or when the live queue would take too long to drain.
	var w *worker.Worker
	bc := batchapi.FromConfig(cfg)
	bc.Store, bc.Client, bc.Publisher, bc.Destination = st, client, pub, target.Dest
	bc.DeadLetters, bc.Logger, bc.Registerer = letters, logger, reg
	bc.Drain = func() time.Duration { return w.Drain() }
	router, err := batchapi.NewRouter(bc)
	if err != nil {
		return err
	}
	batches, err := batchapi.New(bc)
	if err != nil {
		return err
	}

	w, err = worker.New(worker.Config{
		Subscriber: sub, Store: st, DeadLetters: letters, Router: router,
		Upstream: worker.OpenAIUpstream(client, provider),
		Strategy: strategy,
		Catalog: llmq.Catalog{
			Models:  cfg.Models,
			Default: llmq.Model{RPM: float64(wf.rpm), TPM: float64(wf.tpm), Concurrency: wf.concurrency},
		},
		MaxInFlight:     wf.maxInFlight,
		MaxAttempts:     cfg.Retry.MaxAttempts,
		Backoff:         worker.Backoff{Base: cfg.Retry.BaseDelay, Max: cfg.Retry.MaxDelay},
		RetryBudget:     cfg.Retry.Budget,
		FallbackAfter:   cfg.Retry.FallbackAfter,
		FallbackMaxWait: cfg.Retry.FallbackMaxWait,
		ShutdownTimeout: wf.shutdownTimeout,
		Lease:           wf.lease,
		MaxMessageBytes: cfg.MaxMessageBytes,
		Logger:          logger,
		Registerer:      reg,
	})
	if err != nil {
		return err
	}
	stopMetrics, err := serveMetrics(wf.metricsListen, reg, logger)
	if err != nil {
		return err
	}
	defer stopMetrics()
	if err := batches.Start(ctx); err != nil {
		return err
	}
	defer stopWithin(batches.Stop, 30*time.Second)
	logger.Info("worker started", slog.String("broker", target.Kind+"/"+target.Dest),
		slog.String("strategy", string(strategy)), slog.String("upstream", cfg.OpenAIBaseURL))
	err = w.Run(ctx)
	logger.Info("worker stopped")
	return err
}

// newAlerter builds the dead-letter alerter when an alert sink is configured.
func newAlerter(cfg *config.Config, logger *slog.Logger, reg prometheus.Registerer) (*dlq.Alerter, error) {
	a := cfg.Alerts
	if a.AlertmanagerURL == "" && a.WebhookURL == "" {
		return nil, nil
	}
	return dlq.NewAlerter(dlq.AlertConfig{
		AlertmanagerURL: a.AlertmanagerURL, WebhookURL: a.WebhookURL, Severity: a.Severity,
		GroupWait: a.GroupWait, GroupInterval: a.GroupInterval, ResolveTimeout: a.ResolveTimeout,
		MaxPerMinute: a.MaxPerMinute, Logger: logger, Registerer: reg,
	})
}

// brokerURL returns the broker URL to open. For "embedded" it starts an
// in-process Kafka cluster (kfake) and returns its URL and stop function.
func brokerURL(ctx context.Context, cfg *config.Config) (string, func(), error) {
	if cfg.Broker.Kind != config.BrokerEmbedded {
		return cfg.Broker.Raw, func() {}, nil
	}
	topic := cfg.Broker.Destination()
	addrs, stop, err := startEmbeddedKafka(ctx, topic)
	if err != nil {
		return "", nil, err
	}
	return embeddedKafkaURL(addrs, topic), stop, nil
}

// serveMetrics serves reg on addr until the returned stop is called.
func serveMetrics(addr string, reg *prometheus.Registry, logger *slog.Logger) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server", slog.Any("error", err))
		}
	}()
	logger.Info("metrics", slog.String("listen", ln.Addr().String()))
	return func() { stopWithin(srv.Shutdown, 5*time.Second) }, nil
}

// stopWithin calls stop with a context that ends after d.
func stopWithin(stop func(context.Context) error, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = stop(ctx)
}
