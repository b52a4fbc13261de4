package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq/internal/upstreamsim"
)

func init() { register(newSimCmd) }

func newSimCmd() *cobra.Command {
	var fl simFlags
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the OpenAI-compatible upstream simulator (rate limits, latency, faults, Batch API)",
		Long: `Run an OpenAI-compatible upstream with real per-(key, model) RPM/TPM/concurrency
limits, a latency model, fault injection and the Batch API.

--rpm, --tpm and --concurrency apply to every model name; --config FILE (YAML, see
upstreamsim.Config) sets several models, faults, latency, batch speed and quota
schedules. Flags given on the command line override the file.

--enforcement short enforces each limit over --short-bucket (5s) of refill instead
of a whole minute (OpenAI's quantized limits), while the x-ratelimit-* headers keep
the per-minute view; --rate-limit-headers none sends no x-ratelimit-* header at all.

Endpoints: /v1/chat/completions, /v1/files, /v1/batches, /v1/models,
GET /sim/stats, POST /sim/reset, GET|POST /sim/limits, GET /metrics.`,
		Example: "  llmq sim --listen 127.0.0.1:8081 --rpm 600 --tpm 200000 --concurrency 64 --seed 1",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var cfg upstreamsim.Config
			if fl.configPath != "" {
				c, err := upstreamsim.LoadConfig(fl.configPath)
				if err != nil {
					return err
				}
				cfg = c
			}
			fl.apply(&cfg, cmd.Flags().Changed)
			return runSim(cmd, cfg, fl.listen)
		},
	}
	fl.register(cmd)
	return cmd
}

// simFlags are the flags of llmq sim.
type simFlags struct {
	listen, configPath, mode      string
	enforcement, rateLimitHeaders string
	rpm, tpm                      int64
	concurrency                   int
	seed                          uint64
	ttft, perToken, shortBucket   time.Duration
	timeScale                     float64
	apiKeys                       []string
}

// register declares the flags on cmd.
func (fl *simFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&fl.listen, "listen", "127.0.0.1:8081", "address to listen on")
	f.StringVar(&fl.configPath, "config", "", "YAML configuration file (upstreamsim.Config)")
	f.StringVar(&fl.mode, "mode", string(upstreamsim.ModeDefault), "provider to imitate: openai, azure or dashscope")
	f.Int64Var(&fl.rpm, "rpm", upstreamsim.RPMDefault, "requests per minute per (key, model), every model; -1 unlimited")
	f.Int64Var(&fl.tpm, "tpm", upstreamsim.TPMDefault, "tokens per minute per (key, model), every model; -1 unlimited")
	f.IntVar(&fl.concurrency, "concurrency", 0, "max in-flight requests per (key, model), every model; 0 unlimited")
	f.Uint64Var(&fl.seed, "seed", 0, "seed for completions, faults and batch output order")
	f.DurationVar(&fl.ttft, "ttft", 0, "time to first token")
	f.DurationVar(&fl.perToken, "per-token", 0, "time per output token")
	f.Float64Var(&fl.timeScale, "batch-time-scale", upstreamsim.BatchTimeScaleDefault, "divide every Batch API duration by this factor")
	f.StringSliceVar(&fl.apiKeys, "api-key", nil, "accepted API key (repeatable); none means any key")
	f.StringVar(&fl.enforcement, "enforcement", string(upstreamsim.EnforcementDefault), "how limits are enforced: minute (a bucket of one minute) or short (a bucket of --short-bucket)")
	f.DurationVar(&fl.shortBucket, "short-bucket", upstreamsim.ShortBucketDefault, "refill a short bucket holds (--enforcement short)")
	f.StringVar(&fl.rateLimitHeaders, "rate-limit-headers", string(upstreamsim.RateLimitHeadersDefault), "x-ratelimit-* headers on answers: all or none")
}

// apply sets in cfg the flags given on the command line (changed), which
// override the file; --rpm, --tpm and --concurrency apply to every model.
func (fl *simFlags) apply(cfg *upstreamsim.Config, changed func(string) bool) {
	if changed("rpm") {
		cfg.Default.RPM = fl.rpm
	}
	if changed("tpm") {
		cfg.Default.TPM = fl.tpm
	}
	if changed("concurrency") {
		cfg.Default.MaxConcurrency = fl.concurrency
	}
	if changed("seed") {
		cfg.Seed = fl.seed
	}
	if changed("mode") {
		cfg.Mode = upstreamsim.Mode(fl.mode)
	}
	if changed("ttft") {
		cfg.Latency.TTFT = fl.ttft
	}
	if changed("per-token") {
		cfg.Latency.PerToken = fl.perToken
	}
	if changed("batch-time-scale") {
		cfg.Batch.TimeScale = fl.timeScale
	}
	if changed("api-key") {
		cfg.APIKeys = fl.apiKeys
	}
	if changed("enforcement") {
		cfg.Enforcement = upstreamsim.Enforcement(fl.enforcement)
	}
	if changed("short-bucket") {
		cfg.ShortBucket = fl.shortBucket
	}
	if changed("rate-limit-headers") {
		cfg.RateLimitHeaders = upstreamsim.HeaderMode(fl.rateLimitHeaders)
	}
	if changed("rpm") || changed("tpm") || changed("concurrency") {
		// The flags apply to every model name, including configured ones.
		for name, m := range cfg.Models {
			if changed("rpm") {
				m.RPM = fl.rpm
			}
			if changed("tpm") {
				m.TPM = fl.tpm
			}
			if changed("concurrency") {
				m.MaxConcurrency = fl.concurrency
			}
			cfg.Models[name] = m
		}
	}
}

// runSim runs the simulator on listen until the command's context ends.
func runSim(cmd *cobra.Command, cfg upstreamsim.Config, listen string) error {
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	sim, err := upstreamsim.New(cfg, upstreamsim.WithLogger(logger))
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	url, err := sim.Start(ctx, listen)
	if err != nil {
		return err
	}
	printSimLimits(cmd.OutOrStdout(), url, sim)
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return sim.Stop(stopCtx)
}

// printSimLimits prints where the simulator listens and the limits it
// enforces: each configured model's, then every other name's (or that it
// refuses them).
func printSimLimits(w io.Writer, url string, sim *upstreamsim.Server) {
	eff := sim.Config()
	fmt.Fprintf(w, "llmq sim: OPENAI_BASE_URL=%s/v1 mode=%s enforcement=%s rate-limit-headers=%s seed=%d\n",
		url, eff.Mode, enforcementLabel(eff), eff.RateLimitHeaders, eff.Seed)
	limits := func(l upstreamsim.Limits) string {
		n := func(v int64) string {
			if v < 0 {
				return "unlimited"
			}
			return strconv.FormatInt(v, 10)
		}
		c := "unlimited"
		if l.MaxConcurrency > 0 {
			c = strconv.Itoa(l.MaxConcurrency)
		}
		return fmt.Sprintf("rpm=%s tpm=%s concurrency=%s", n(l.RPM), n(l.TPM), c)
	}
	for _, name := range slices.Sorted(maps.Keys(eff.Models)) {
		fmt.Fprintf(w, "  model %s: %s\n", name, limits(sim.Limits(name)))
	}
	if eff.RestrictModels {
		fmt.Fprintln(w, "  any other model: 404 model_not_found (restrict_models)")
		return
	}
	other := "any model"
	if len(eff.Models) > 0 {
		other = "any other model"
	}
	fmt.Fprintf(w, "  %s: %s (set restrict_models to refuse unknown names)\n", other, limits(eff.Default.Limits))
}

// enforcementLabel is the enforcement in force, with its bucket when short.
func enforcementLabel(c upstreamsim.Config) string {
	if c.Enforcement == upstreamsim.EnforcementShort {
		return fmt.Sprintf("short(%v)", c.ShortBucket)
	}
	return string(c.Enforcement)
}
