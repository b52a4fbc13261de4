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
	var (
		listen, configPath, mode      string
		enforcement, rateLimitHeaders string
		rpm, tpm                      int64
		concurrency                   int
		seed                          uint64
		ttft, perToken, shortBucket   time.Duration
		timeScale                     float64
		apiKeys                       []string
	)
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
			if configPath != "" {
				c, err := upstreamsim.LoadConfig(configPath)
				if err != nil {
					return err
				}
				cfg = c
			}
			f := cmd.Flags()
			if f.Changed("rpm") {
				cfg.Default.RPM = rpm
			}
			if f.Changed("tpm") {
				cfg.Default.TPM = tpm
			}
			if f.Changed("concurrency") {
				cfg.Default.MaxConcurrency = concurrency
			}
			if f.Changed("seed") {
				cfg.Seed = seed
			}
			if f.Changed("mode") {
				cfg.Mode = upstreamsim.Mode(mode)
			}
			if f.Changed("ttft") {
				cfg.Latency.TTFT = ttft
			}
			if f.Changed("per-token") {
				cfg.Latency.PerToken = perToken
			}
			if f.Changed("batch-time-scale") {
				cfg.Batch.TimeScale = timeScale
			}
			if f.Changed("api-key") {
				cfg.APIKeys = apiKeys
			}
			if f.Changed("enforcement") {
				cfg.Enforcement = upstreamsim.Enforcement(enforcement)
			}
			if f.Changed("short-bucket") {
				cfg.ShortBucket = shortBucket
			}
			if f.Changed("rate-limit-headers") {
				cfg.RateLimitHeaders = upstreamsim.HeaderMode(rateLimitHeaders)
			}
			if f.Changed("rpm") || f.Changed("tpm") || f.Changed("concurrency") {
				// The flags apply to every model name, including configured ones.
				for name, m := range cfg.Models {
					if f.Changed("rpm") {
						m.RPM = rpm
					}
					if f.Changed("tpm") {
						m.TPM = tpm
					}
					if f.Changed("concurrency") {
						m.MaxConcurrency = concurrency
					}
					cfg.Models[name] = m
				}
			}
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
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:8081", "address to listen on")
	f.StringVar(&configPath, "config", "", "YAML configuration file (upstreamsim.Config)")
	f.StringVar(&mode, "mode", string(upstreamsim.ModeDefault), "provider to imitate: openai, azure or dashscope")
	f.Int64Var(&rpm, "rpm", upstreamsim.RPMDefault, "requests per minute per (key, model), every model; -1 unlimited")
	f.Int64Var(&tpm, "tpm", upstreamsim.TPMDefault, "tokens per minute per (key, model), every model; -1 unlimited")
	f.IntVar(&concurrency, "concurrency", 0, "max in-flight requests per (key, model), every model; 0 unlimited")
	f.Uint64Var(&seed, "seed", 0, "seed for completions, faults and batch output order")
	f.DurationVar(&ttft, "ttft", 0, "time to first token")
	f.DurationVar(&perToken, "per-token", 0, "time per output token")
	f.Float64Var(&timeScale, "batch-time-scale", upstreamsim.BatchTimeScaleDefault, "divide every Batch API duration by this factor")
	f.StringSliceVar(&apiKeys, "api-key", nil, "accepted API key (repeatable); none means any key")
	f.StringVar(&enforcement, "enforcement", string(upstreamsim.EnforcementDefault), "how limits are enforced: minute (a bucket of one minute) or short (a bucket of --short-bucket)")
	f.DurationVar(&shortBucket, "short-bucket", upstreamsim.ShortBucketDefault, "refill a short bucket holds (--enforcement short)")
	f.StringVar(&rateLimitHeaders, "rate-limit-headers", string(upstreamsim.RateLimitHeadersDefault), "x-ratelimit-* headers on answers: all or none")
	return cmd
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
