package main

import (
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/producer"
)

func init() { register(newAPICmd) }

func newAPICmd() *cobra.Command {
	var (
		listen, metricsListen string
		sweepInterval         time.Duration
		sweepGrace            time.Duration
		server                app.APIConfig
	)
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Serve the HTTP job API (enqueue, status, cancel, queue backpressure) and the web console, and run the outbox sweeper",
		Long: `api serves POST/GET/DELETE /v1/jobs, GET /v1/queue, /v1/stats/jobs, /v1/dead-letters, /v1/batches,
/healthz, /readyz and /openapi.yaml on --listen, the web console at /ui, and /metrics on
--metrics-listen (a port of its own, loopback by default: metrics name every tenant's
traffic). API keys come from LLMQ_API_KEYS (or LLMQ_API_KEYS_FILE) or api_keys in the config
file, operator keys (every tenant, and the batches; name=key names one in the audit log) from
LLMQ_OPERATOR_KEYS(_FILE) or operator_keys; backpressure thresholds from backpressure.soft_depth / hard_depth; the limits
at the door (requests per minute per key and tenant, failed authentications per client address,
the trusted proxy's address header) from rate_limits.*, a gateway tenant's waiting calls and the
furthest deadline from gateway.max_waiting / max_deadline. The
console's sessions are sealed with LLMQ_CONSOLE_SECRET(_FILE), the same on every replica
(random per process when unset); cancelling a batch asks OPENAI_BASE_URL with OPENAI_API_KEY.

TLS: with --tls-cert and --tls-key the API serves HTTPS only. Behind a reverse proxy or a
load balancer that terminates TLS, leave them out, keep --listen on an address only the proxy
reaches, and let the proxy forward the Authorization header unchanged. The console's cookies are
Secure when the proxy sends X-Forwarded-Proto: https (most do); with one that does not, add
--console-secure-cookies. The timeouts bound a
slow client; a proxy in front should allow at least --write-timeout for an answer.

Jobs are recorded in Postgres before they are published; the outbox sweeper republishes any
job whose publish was not confirmed (a crash, a broker outage) after --sweep-grace.
SIGINT/SIGTERM stop accepting connections, finish the requests in flight and stop the sweeper.`,
		Args: cobra.NoArgs,
	}
	flags := config.BindFlags(cmd, config.FlagDatabase|config.FlagBroker|config.FlagAPIKeys)
	fs := cmd.Flags()
	fs.StringVar(&listen, "listen", app.APIListenDefault, "address to serve on")
	fs.StringVar(&metricsListen, "metrics-listen", app.APIMetricsListenDefault, "address of the Prometheus /metrics endpoint (empty: none)")
	fs.StringVar(&server.TLSCert, "tls-cert", "", "PEM certificate (chain) file: serve HTTPS (with --tls-key)")
	fs.StringVar(&server.TLSKey, "tls-key", "", "PEM private key file of --tls-cert")
	fs.BoolVar(&server.ConsoleSecureCookies, "console-secure-cookies", false,
		"mark the console's cookies Secure on every answer (default: when the request came over TLS or with X-Forwarded-Proto: https)")
	fs.DurationVar(&server.ReadHeaderTimeout, "read-header-timeout", app.APIReadHeaderTimeoutDefault, "time to read a request's headers (-1: none)")
	fs.DurationVar(&server.ReadTimeout, "read-timeout", app.APIReadTimeoutDefault, "time to read a whole request, body included (-1: none)")
	fs.DurationVar(&server.WriteTimeout, "write-timeout", app.APIWriteTimeoutDefault, "time from a request's headers to the end of its answer (-1: none)")
	fs.DurationVar(&server.IdleTimeout, "idle-timeout", app.APIIdleTimeoutDefault, "time an idle keep-alive connection is kept (-1: none)")
	fs.DurationVar(&sweepInterval, "sweep-interval", producer.SweepIntervalDefault, "time between outbox sweeps")
	fs.DurationVar(&sweepGrace, "sweep-grace", producer.SweepGraceDefault, "age of an unconfirmed job before the sweeper republishes it")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := flags.Load()
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		// Like llmq worker, the API brings the schema up to date itself
		// (idempotent, and safe against a worker migrating at the same time).
		server.Listen, server.SweepInterval, server.SweepGrace = listen, sweepInterval, sweepGrace
		a, err := app.New(ctx, app.Config{
			Settings: cfg, Migrate: true, Logger: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)),
			API: &server, MetricsListen: metricsListen,
		})
		if err != nil {
			return err
		}
		return a.Run(ctx)
	}
	return cmd
}
