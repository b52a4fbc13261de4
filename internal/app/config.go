package app

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/worker"
)

// Defaults of the process (the components own theirs).
const (
	// APIListenDefault is the address of `llmq api`: loopback, so that a
	// process started by hand is not reachable from the network until an
	// operator says so (the deploy/ files listen on 0.0.0.0 explicitly).
	APIListenDefault = "127.0.0.1:8080"
	// MetricsListenDefault is the address of `llmq worker`'s /metrics and
	// /healthz, loopback for the same reason.
	MetricsListenDefault = "127.0.0.1:9090"
	// APIMetricsListenDefault is the address of `llmq api`'s /metrics: a
	// listener of its own, not the port tenants reach.
	APIMetricsListenDefault = "127.0.0.1:9091"

	// APIReadHeaderTimeoutDefault bounds the reading of a request's
	// headers.
	APIReadHeaderTimeoutDefault = 10 * time.Second
	// APIReadTimeoutDefault bounds the reading of a whole request, body
	// included: a 16 MiB batch at 1 MB/s fits, a client that trickles its
	// body is cut off.
	APIReadTimeoutDefault = 30 * time.Second
	// APIWriteTimeoutDefault bounds a request from the end of its headers
	// to the end of its answer. The job API answers at once; an endpoint
	// that waits for a completion (a gateway) needs a longer one.
	APIWriteTimeoutDefault = time.Minute
	// APIIdleTimeoutDefault bounds an idle keep-alive connection.
	APIIdleTimeoutDefault = 2 * time.Minute
)

// Config says which parts of llmq one process runs and what differs from
// the parsed configuration. What is not set here comes from Settings, and
// a zero there means the component's own default.
type Config struct {
	// Settings is the parsed configuration (config.Load, or built by hand
	// by the demo and the benchmark). Required.
	Settings *config.Config

	// Migrate brings the schema up to date once the store opens. A
	// database that does not exist is an error (store.ErrNoDatabase) unless
	// CreateDatabase.
	Migrate bool
	// CreateDatabase creates the database when it is missing (the demo, on
	// a database of its own). Only `llmq migrate` does it for the
	// long-running commands, so that a misspelt name stops them.
	CreateDatabase bool
	// Worker, when set, runs the worker with its dead-letter writer, alert
	// sinks, upstream client and batch lane.
	Worker *WorkerConfig
	// API, when set, serves the HTTP API with its producer, outbox sweeper
	// and dead-letter endpoints.
	API *APIConfig
	// Producer builds a producer without an API (`llmq produce`). The API
	// has one anyway.
	Producer bool
	// MetricsListen is the address of a Prometheus /metrics endpoint.
	// "" = none.
	MetricsListen string

	// Logger receives every component's logs. nil = slog.Default().
	Logger *slog.Logger
	// Registerer, when set, receives every component's collectors too,
	// besides the App's own registry (Registry): for a program that serves
	// its own /metrics, or a test that lists them.
	Registerer prometheus.Registerer
	// Clock times New's retries of a broker that is down at start-up.
	// nil = the system clock.
	Clock clockwork.Clock
}

// WorkerConfig is what the worker takes beyond the settings.
type WorkerConfig struct {
	// Strategy is the shaping strategy. "" = Settings.Strategy.
	Strategy shaping.Strategy
	// DefaultModel is the quota of every model Settings.Models does not
	// list (zero fields: unknown).
	DefaultModel llmq.Model
	// MaxInFlight bounds the jobs the worker holds at once (claimed:
	// waiting for admission, calling or backing off).
	// 0 = worker.MaxInFlightDefault.
	MaxInFlight int
	// ShutdownTimeout is how long in-flight jobs may finish at Stop.
	// 0 = worker.ShutdownTimeoutDefault.
	ShutdownTimeout time.Duration
	// Lease is how long a claimed job is kept from other workers.
	// 0 = worker.LeaseDefault.
	Lease time.Duration
	// Provider is the upstream's error dialect. "" = worker.ProviderOpenAI.
	Provider worker.Provider
	// Replica names the worker in the quota ledger, through which the
	// workers on one upstream and API key share its quotas.
	// "" = the worker's owner name (host, pid and a random part).
	Replica string
	// LedgerPeriod is how often the worker renews its share of the
	// quotas. 0 = worker.LedgerPeriodDefault.
	LedgerPeriod time.Duration
	// UpstreamTimeout bounds one upstream call.
	// 0 = worker.UpstreamTimeoutDefault.
	UpstreamTimeout time.Duration
	// DashScopeWaitTimeout, when positive, is sent as
	// X-DashScope-Wait-Timeout and added to the call's timeout.
	DashScopeWaitTimeout time.Duration

	// NoBatchLane runs the live lane only: deferrable jobs are not routed
	// to the provider's Batch API.
	NoBatchLane bool
	// BatchPollInterval is the batch lane's period.
	// 0 = batchapi.PollIntervalDefault.
	BatchPollInterval time.Duration
	// BatchDrain replaces the worker's drain estimate in the batch lane's
	// routing rule (the demo pretends the live lane is backed up).
	// nil = the worker's own estimate.
	BatchDrain func() time.Duration
}

// APIConfig is what the HTTP API takes beyond the settings.
type APIConfig struct {
	// Listen is the address to serve on. Required unless Listener is set.
	Listen string
	// Listener, when set, is served instead of Listen. The App owns it
	// from New on: Stop closes it, as does a failing New.
	Listener net.Listener
	// SweepInterval and SweepGrace drive the outbox sweeper. 0 = the
	// producer's SweepIntervalDefault and SweepGraceDefault.
	SweepInterval time.Duration
	SweepGrace    time.Duration

	// TLSCert and TLSKey are the PEM files of the certificate (chain
	// first) and its key: when both are set the API serves HTTPS only.
	// Both empty: plain HTTP (behind a proxy that terminates TLS).
	TLSCert, TLSKey string

	// ConsoleSecureCookies marks the web console's cookies Secure on every
	// answer, for a proxy that terminates TLS without sending
	// X-Forwarded-Proto. false = Secure when the request came over TLS or
	// says it did through X-Forwarded-Proto: https (console.Config.Secure).
	ConsoleSecureCookies bool

	// ConsoleRefresh is how often the web console's live parts poll.
	// 0 = console.RefreshDefault.
	ConsoleRefresh time.Duration

	// The server's timeouts: 0 = the APIXxxTimeoutDefault, -1 = none.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
}

// timeout is d with 0 meaning def and -1 none.
func timeout(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

func (c Config) validate() error {
	var errs []error
	if c.Settings == nil {
		errs = append(errs, errors.New("app: Config.Settings is required"))
	}
	if c.API != nil && c.API.Listen == "" && c.API.Listener == nil {
		errs = append(errs, errors.New("app: Config.API.Listen or Config.API.Listener is required"))
	}
	if c.API != nil {
		if (c.API.TLSCert == "") != (c.API.TLSKey == "") {
			errs = append(errs, errors.New("app: Config.API.TLSCert and TLSKey go together: set both or neither"))
		}
		for name, d := range map[string]time.Duration{"ReadHeaderTimeout": c.API.ReadHeaderTimeout,
			"ReadTimeout": c.API.ReadTimeout, "WriteTimeout": c.API.WriteTimeout, "IdleTimeout": c.API.IdleTimeout} {
			if d < -1 {
				errs = append(errs, fmt.Errorf("app: Config.API.%s must be positive, 0 (the default) or -1 (none); got %v", name, d))
			}
		}
	}
	if c.Worker != nil && c.Worker.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("app: Config.Worker.MaxInFlight must not be negative; got %d", c.Worker.MaxInFlight))
	}
	return errors.Join(errs...)
}
