package upstreamsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Option configures a Server.
type Option func(*options)

type options struct {
	clock      clockwork.Clock
	logger     *slog.Logger
	registerer prometheus.Registerer
	streamHook StreamHook
}

// StreamHook is called before each content chunk of a stream is sent,
// with the request's context (done once the client left) and the chunk's
// number (from 1). It may block; a non-nil error ends the stream with an
// error event in OpenAI's shape carrying its text. Tests use it to hold a
// stream open and to see a client leave.
type StreamHook func(ctx context.Context, chunk int) error

// WithStreamHook sets the hook of every stream (default none).
func WithStreamHook(h StreamHook) Option { return func(o *options) { o.streamHook = h } }

// WithClock sets the clock (default clockwork.NewRealClock()). Tests pass a
// clockwork.FakeClock to run in virtual time.
func WithClock(c clockwork.Clock) Option { return func(o *options) { o.clock = c } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRegisterer also registers the simulator's metrics with r. They are
// always served on the simulator's own /metrics.
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.registerer = r } }

// Server is the simulator. Create it with New; serve Handler yourself or
// call Start. It is safe for concurrent use.
type Server struct {
	cfg     Config
	hook    StreamHook
	clock   clockwork.Clock
	log     *slog.Logger
	born    time.Time
	limiter *Limiter
	metrics *metrics
	stats   *statsCollector
	batches *batchStore
	handler http.Handler

	limits   *limitBook
	dialect  dialect
	chat     completer
	dice     *dice
	inflight *inflightCounts

	// lifecycle
	lifeMu   sync.Mutex
	srv      *http.Server
	baseStop context.CancelFunc
	done     chan struct{}
	hangCtx  context.Context
	hangStop context.CancelFunc
}

// New validates cfg, applies its defaults and returns a Server.
func New(cfg Config, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	o := options{clock: clockwork.NewRealClock(), logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	cs, err := loadCodecs()
	if err != nil {
		return nil, err
	}
	if len(tokenWords()) == 0 {
		return nil, fmt.Errorf("upstreamsim: no single-token words in the vocabulary")
	}
	s := &Server{
		cfg:      cfg,
		clock:    o.clock,
		log:      o.logger,
		born:     o.clock.Now(),
		hook:     o.streamHook,
		limiter:  newLimiter(cfg),
		limits:   newLimitBook(cfg, o.clock, o.logger),
		dialect:  dialect{cfg: cfg},
		chat:     completer{cfg: cfg, counters: map[string]counter{}},
		dice:     &dice{rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed))},
		inflight: &inflightCounts{m: map[string]*atomic.Int64{}},
	}
	for name, c := range cs {
		s.chat.counters[name] = newCounter(c)
	}
	s.hangCtx, s.hangStop = context.WithCancel(context.Background())
	reg := prometheus.NewRegistry()
	s.metrics = newMetrics()
	if err := s.metrics.register(reg); err != nil {
		return nil, err
	}
	if o.registerer != nil {
		if err := s.metrics.register(o.registerer); err != nil {
			return nil, err
		}
	}
	s.stats = newStatsCollector(s.metrics)
	s.batches = newBatchStore(s)
	s.handler = s.routes(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return s, nil
}

// newLimiter returns the limiter of cfg's enforcement.
func newLimiter(cfg Config) *Limiter {
	if cfg.Enforcement == EnforcementShort {
		return NewLimiter(ShortBuckets(cfg.ShortBucket))
	}
	return NewLimiter()
}

// Config returns the configuration in force (with defaults applied).
func (s *Server) Config() Config { return s.cfg }

// Clock returns the server's clock.
func (s *Server) Clock() clockwork.Clock { return s.clock }

// Handler returns the HTTP handler serving every endpoint.
func (s *Server) Handler() http.Handler { return s.handler }

// Limiter returns the server's limiter (for tests that drive it directly).
func (s *Server) Limiter() *Limiter { return s.limiter }

// Start listens on addr (e.g. "127.0.0.1:0") and serves in the background.
// It returns the base URL, e.g. "http://127.0.0.1:8081" (append "/v1" for
// an OpenAI client's base URL).
func (s *Server) Start(ctx context.Context, addr string) (string, error) {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.srv != nil {
		return "", ErrAlreadyStarted
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("upstreamsim: listen %s: %w", addr, err)
	}
	base, stop := context.WithCancel(context.WithoutCancel(ctx))
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.srv, s.baseStop, s.done = srv, stop, make(chan struct{})
	s.hangCtx, s.hangStop = context.WithCancel(context.Background())
	done := s.done
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("upstreamsim: serve", "err", err)
		}
	}()
	url := "http://" + ln.Addr().String()
	s.log.Info("upstreamsim: listening", "url", url, "mode", s.cfg.Mode)
	return url, nil
}

// Stop ends hanging requests, then shuts the listener down, waiting for
// in-flight requests until ctx is done. It is safe to call twice.
func (s *Server) Stop(ctx context.Context) error {
	s.lifeMu.Lock()
	srv, stop, done := s.srv, s.baseStop, s.done
	s.srv = nil
	s.hangStop()
	s.lifeMu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		stop()
		err = errors.Join(err, srv.Close())
	}
	stop()
	<-done
	if err != nil {
		return fmt.Errorf("upstreamsim: stop: %w", err)
	}
	return nil
}

// SetLimits changes the limits of model at run time ("" or "*" for the
// default applied to every model without its own entry). Zero fields keep
// the value in force (use -1 for unlimited / no cap). Existing buckets keep
// their level, capped at the new capacity, and refill at the new rate.
func (s *Server) SetLimits(model string, l Limits) { s.limits.set(model, l) }

// Limits returns the limits in force for model.
func (s *Server) Limits(model string) Limits {
	m, _ := s.limits.model(model)
	return m.Limits
}

// Reset clears the statistics, the limiter buckets and the batches and
// files. Limit overrides and the schedule position are kept.
func (s *Server) Reset() {
	s.limiter.Reset()
	s.stats.reset()
	s.batches.reset()
}

// Stats returns the accounting since New or the last Reset.
func (s *Server) Stats() Stats {
	s.batches.advanceAll(s.clock.Now())
	return s.stats.snapshot()
}
