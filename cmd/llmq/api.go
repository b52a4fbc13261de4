package main

import (
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
	"github.com/spf13/cobra"

	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/migrations"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/open"
)

func init() { register(newAPICmd) }

func newAPICmd() *cobra.Command {
	var (
		listen        string
		sweepInterval time.Duration
		sweepGrace    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Serve the HTTP job API (enqueue, status, cancel, queue backpressure) and run the outbox sweeper",
		Long: `api serves POST/GET/DELETE /v1/jobs, GET /v1/queue, /v1/dead-letters, /healthz, /readyz,
/metrics and /openapi.yaml. API keys come from LLMQ_API_KEYS (key1:tenantA,...) or api_keys in
the config file; backpressure thresholds from backpressure.soft_depth / hard_depth.

Jobs are recorded in Postgres before they are published; the outbox sweeper republishes any
job whose publish was not confirmed (a crash, a broker outage) after --sweep-grace.
SIGINT/SIGTERM stop accepting connections, finish the requests in flight and stop the sweeper.`,
		Args: cobra.NoArgs,
	}
	flags := config.BindFlags(cmd)
	fs := cmd.Flags()
	fs.StringVar(&listen, "listen", ":8080", "address to serve on")
	fs.DurationVar(&sweepInterval, "sweep-interval", producer.SweepIntervalDefault, "time between outbox sweeps")
	fs.DurationVar(&sweepGrace, "sweep-grace", producer.SweepGraceDefault, "age of an unconfirmed job before the sweeper republishes it")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := flags.Load()
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		log := slog.New(slog.NewTextHandler(os.Stderr, nil))
		// Like llmq worker, the API brings the schema up to date itself
		// (idempotent, and safe against a worker migrating at the same time).
		if _, err := migrations.Up(ctx, cfg.DatabaseURL); err != nil {
			return fmt.Errorf("migrate %s: %w", cfg.DatabaseURL, err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		env, err := openProducer(ctx, cfg, log, reg)
		if err != nil {
			return err
		}
		defer env.close()
		sweeper, err := producer.NewSweeper(producer.SweeperConfig{Producer: env.producer, Interval: sweepInterval, Grace: sweepGrace})
		if err != nil {
			return err
		}
		svc, err := dlq.NewService(dlq.Config{Store: env.store, Publisher: env.publisher,
			Destination: cfg.Broker.Destination(), Logger: log, Registerer: reg})
		if err != nil {
			return err
		}
		handler, err := api.New(api.Config{
			Producer: env.producer, Store: env.store, Keys: cfg.APIKeys,
			DeadLetters: dlq.NewHTTPHandler(svc, api.TenantOf), MaxMessageBytes: cfg.MaxMessageBytes,
			Logger: log, Registerer: reg, Gatherer: reg,
		})
		if err != nil {
			return err
		}
		if len(cfg.APIKeys) == 0 {
			log.Warn("no API keys configured (LLMQ_API_KEYS or api_keys): every /v1 request will be refused")
		}
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return fmt.Errorf("api: listen: %w", err)
		}
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		if err := sweeper.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		log.Info("api listening", slog.String("addr", ln.Addr().String()), slog.String("broker", env.brokerName),
			slog.String("destination", cfg.Broker.Destination()))
		var serveErr error
		select {
		case <-ctx.Done():
		case serveErr = <-served:
		}
		log.Info("api shutting down")
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = errors.Join(srv.Shutdown(shutdownCtx), sweeper.Stop(shutdownCtx))
		if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
			err = errors.Join(serveErr, err)
		}
		return err
	}
	return cmd
}

// producerEnv is a producer with what it was built on.
type producerEnv struct {
	store      *store.Store
	publisher  transport.Publisher
	producer   *producer.Producer
	brokerName string
	close      func()
}

// openProducer opens the store and the broker named by cfg (an in-process
// Kafka cluster for "embedded") and builds a producer whose depth probe is a
// subscriber that is never consumed.
func openProducer(ctx context.Context, cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) (*producerEnv, error) {
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	closers := []func(){st.Close}
	env := &producerEnv{store: st, close: func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}}
	dest := cfg.Broker.Destination()
	// "embedded" starts an in-process Kafka cluster, as llmq worker does.
	url, stopBroker, err := brokerURL(ctx, cfg)
	if err != nil {
		env.close()
		return nil, err
	}
	closers = append(closers, stopBroker)
	env.brokerName = cfg.Broker.String()
	if url != cfg.Broker.Raw {
		env.brokerName = "embedded " + url
	}
	// The probe reads the lag of the consumer group the URL names (the
	// workers' group: llmq worker opens the same URL).
	opts := open.Options{Logger: log}
	pub, probe, err := open.Open(ctx, url, opts)
	if err != nil {
		env.close()
		return nil, err
	}
	closers = append(closers, func() { _ = pub.Close() }, func() { _ = probe.Close() })
	env.publisher = pub
	env.producer, err = producer.New(producer.Config{
		Publisher: pub, Store: st, Destination: dest, DepthProbe: probe,
		ProbeCountsInFlight: cfg.Broker.Kind != config.BrokerAMQP,
		SoftDepth:           cfg.Backpressure.SoftDepth, HardDepth: cfg.Backpressure.HardDepth,
		Logger: log, Registerer: reg,
	})
	if err != nil {
		env.close()
		return nil, err
	}
	return env, nil
}
