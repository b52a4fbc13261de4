package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	openai "github.com/sashabaranov/go-openai"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/app"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/internal/workload"
	"github.com/llmq/llmq/shaping"
)

// The gateway scenario is the load test of docs/design/gateway.md: agents that
// share one tight, flaky endpoint and call it synchronously, first
// straight to it, then through llmq's gateway (POST /v1/chat/completions
// on the API, the worker behind it). The work fits the quota (at
// gatewayRPM the agents' calls need a few minutes), so no deadline is at
// risk: every failure through llmq is one the gateway let through.
const (
	gatewayRPM         = 60
	gatewayTPM         = 20_000
	gatewayConcurrency = 4
	// gatewayBadGateway and gatewayResets are the shares of calls the
	// simulator answers with a 502 page or a connection reset.
	gatewayBadGateway = 0.03
	gatewayResets     = 0.02
	// The answers are 50-200 tokens long; every call asks
	// max_completion_tokens gatewayMaxTokens (the note's max_tokens).
	gatewayMinOutput = 50
	gatewayMaxOutput = 200
	gatewayMaxTokens = 200
	gatewayAgents    = 11
	// gatewayCalls is each agent's sequential calls at scale 1 (Scale
	// multiplies it, at least one call each).
	gatewayCalls = 20
	// gatewayTimeout is each call's timeout, announced to llmq as the
	// call's deadline (X-LLMQ-Deadline).
	gatewayTimeout = 60 * time.Second
	// gatewayKey is the agents' llmq API key.
	gatewayKey = "sk-llmq-bench-agent"
)

// GatewayRow is how one way of calling fared.
type GatewayRow struct {
	// Calls and Failures count the calls made and those that did not
	// return a completion (a deadline 429 counts); Errors counts the
	// failures by kind (HTTP status, "timeout", "connection error").
	Calls, Failures int
	Errors          map[string]int
	// P50 and P99 are the latencies of the calls that succeeded; Took is
	// the time the agents took in all.
	P50, P99, Took time.Duration
	// UpstreamCalls, UpstreamRateLimited and UpstreamFaults are the
	// simulator's count of the calls it received, the 429s it answered
	// and the faults (502s, resets) it injected.
	UpstreamCalls, UpstreamRateLimited, UpstreamFaults int64
}

// GatewayResult is the gateway scenario's runs: direct, through llmq with
// the deadline announced and the quotas configured, and through llmq as a
// plain SDK finds it (no llmq header, no quota configured: the worker
// learns the provider's limits from its headers).
type GatewayResult struct {
	Direct, Gateway, Plain GatewayRow
}

// gatewaySim is the tight, flaky provider of the gateway load test.
// Latency: 200 ms to the first token and 10 ms per token (0.7-2.2 s a
// call).
func gatewaySim() upstreamsim.Config {
	return upstreamsim.Config{
		Models: map[string]upstreamsim.ModelConfig{Primary: {Limits: upstreamsim.Limits{
			RPM: gatewayRPM, TPM: gatewayTPM, MaxConcurrency: gatewayConcurrency}}},
		Latency: upstreamsim.LatencyConfig{TTFT: 200 * time.Millisecond, PerToken: 10 * time.Millisecond},
		Output:  upstreamsim.OutputConfig{Distribution: upstreamsim.DistUniform, Min: gatewayMinOutput, Max: gatewayMaxOutput},
		Faults: upstreamsim.FaultConfig{Rates: map[upstreamsim.FaultKind]float64{
			upstreamsim.FaultBadGateway: gatewayBadGateway, upstreamsim.FaultConnectionReset: gatewayResets}},
		APIKeys: []string{simAPIKey},
		Seed:    2,
	}
}

// gateway runs the agents straight against the simulator, then against
// llmq's gateway in front of a fresh one, and writes the section.
func (b *Bench) gateway(ctx context.Context, md *strings.Builder, rep *Report) error {
	calls := max(1, int(math.Round(gatewayCalls*b.cfg.Scale)))
	res := &GatewayResult{}
	fmt.Fprintf(b.cfg.Progress, "bench: %-18s %d agents x %d calls ...", "gateway-direct", gatewayAgents, calls)
	err := b.withSim(ctx, func(root string) error {
		res.Direct = runAgents(ctx, root+"/v1", simAPIKey, calls, true)
		return nil
	}, &res.Direct)
	if err != nil {
		fmt.Fprintln(b.cfg.Progress, " failed")
		return err
	}
	fmt.Fprintf(b.cfg.Progress, " done in %s: %d of %d failed\n", res.Direct.Took.Round(time.Second), res.Direct.Failures, res.Direct.Calls)
	fmt.Fprintf(b.cfg.Progress, "bench: %-18s %d agents x %d calls ...", "gateway-llmq", gatewayAgents, calls)
	if res.Gateway, err = b.throughLLMQ(ctx, calls, false); err != nil {
		fmt.Fprintln(b.cfg.Progress, " failed")
		return err
	}
	fmt.Fprintf(b.cfg.Progress, " done in %s: %d of %d failed\n", res.Gateway.Took.Round(time.Second), res.Gateway.Failures, res.Gateway.Calls)
	fmt.Fprintf(b.cfg.Progress, "bench: %-18s %d agents x %d calls ...", "gateway-plain", gatewayAgents, calls)
	if res.Plain, err = b.throughLLMQ(ctx, calls, true); err != nil {
		fmt.Fprintln(b.cfg.Progress, " failed")
		return err
	}
	fmt.Fprintf(b.cfg.Progress, " done in %s: %d of %d failed\n", res.Plain.Took.Round(time.Second), res.Plain.Failures, res.Plain.Calls)
	rep.Gateway = res

	fmt.Fprintf(md, `## 6. Agents on a shared, flaky endpoint: direct, then through gateway mode ([gateway scheduling](../design/gateway.md))

%d agents each make %d sequential chat completions (max_completion_tokens %d, answers of %d-%d tokens) with a
%s timeout and no retries of their own (go-openai, which has none). The provider allows %d RPM,
%s TPM and %d calls in flight, and answers %.0f%% of the calls with a 502 page and resets %.0f%% of the
connections. *Direct*: the agents call the simulator. *Through llmq*: the agents call
`+"`POST /v1/chat/completions`"+` on `+"`llmq api`"+` (announcing their timeout as
`+"`X-LLMQ-Deadline`"+`), and one worker calls a fresh simulator with the same settings; API,
worker, in-memory broker and Postgres in one process. *Plain SDK*: the same, with no llmq header
and no quota configured (the worker learns the limits from the provider's headers, and its calls at a time from its 429s). A failure is any call that does not return a
completion, a deadline 429 included; latencies are the agents' own, of the calls that succeeded.
The upstream columns are the simulator's count of the calls it received, its 429s and the 502s
and resets it injected (through llmq, every one of them retried inside llmq).

| path | calls | failed | failure rate | failures by kind | p50 | p99 | time for all calls | upstream calls | upstream 429s | upstream 502s + resets |
|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|
%s%s%s
`, gatewayAgents, calls, gatewayMaxTokens, gatewayMinOutput, gatewayMaxOutput, gatewayTimeout, gatewayRPM, kilo(gatewayTPM),
		gatewayConcurrency, 100*gatewayBadGateway, 100*gatewayResets, res.Direct.markdown("direct"), res.Gateway.markdown("through llmq"),
		res.Plain.markdown("plain SDK through llmq"))
	return nil
}

func (r GatewayRow) markdown(path string) string {
	kinds := "none"
	if len(r.Errors) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
			parts = append(parts, fmt.Sprintf("%s: %d", k, r.Errors[k]))
		}
		kinds = strings.Join(parts, ", ")
	}
	return fmt.Sprintf("| %s | %d | %d | %.1f%% | %s | %s | %s | %s | %d | %d | %d |\n", path, r.Calls, r.Failures,
		100*float64(r.Failures)/float64(max(r.Calls, 1)), kinds, secs(r.P50), secs(r.P99), secs(r.Took),
		r.UpstreamCalls, r.UpstreamRateLimited, r.UpstreamFaults)
}

// withSim runs f against a simulator of the gateway scenario, then
// records the simulator's counts in row.
func (b *Bench) withSim(ctx context.Context, f func(root string) error, row *GatewayRow) error {
	sim, err := upstreamsim.New(gatewaySim(), upstreamsim.WithLogger(b.log))
	if err != nil {
		return fmt.Errorf("bench: gateway: simulator: %w", err)
	}
	root, err := sim.Start(ctx, "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer func() { _ = app.StopWithin(ctx, sim.Stop, stopTimeout) }()
	if err := f(root); err != nil {
		return err
	}
	st := sim.Stats().Models[Primary]
	row.UpstreamRateLimited, row.UpstreamFaults = total(st.RateLimited), total(st.Faults)
	row.UpstreamCalls = st.Accepted + row.UpstreamRateLimited
	return nil
}

// throughLLMQ runs the agents against the gateway of an API and a worker
// in one process, in a database of their own; plain agents send no llmq
// header, and the model's quota is not configured.
func (b *Bench) throughLLMQ(ctx context.Context, calls int, plain bool) (GatewayRow, error) {
	var row GatewayRow
	dbURL, drop, err := b.database(ctx)
	if err != nil {
		return row, err
	}
	defer drop()
	err = b.withSim(ctx, func(root string) error {
		broker, err := config.ParseBroker("memory://gateway-" + uuid.NewString()[:8] + "/" + queueName)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		model := llmq.Model{RPM: gatewayRPM, TPM: gatewayTPM, Concurrency: gatewayConcurrency}
		if plain {
			model = llmq.Model{}
		}
		a, err := app.New(ctx, app.Config{
			Settings: &config.Config{DatabaseURL: dbURL, Broker: broker, OpenAIBaseURL: root + "/v1", OpenAIAPIKey: simAPIKey,
				Models:  map[string]llmq.Model{Primary: model},
				APIKeys: map[string]string{gatewayKey: tenant}},
			Migrate: true, Logger: b.log,
			Worker: &app.WorkerConfig{Strategy: shaping.StrategyShape, ShutdownTimeout: shutdownTimeout,
				UpstreamTimeout: 30 * time.Second, NoBatchLane: true},
			// A call waits for its job: the server's write timeout
			// does not bound a gateway call (it lifts it).
			API: &app.APIConfig{Listener: ln},
		})
		if err != nil {
			return fmt.Errorf("bench: gateway: %w", err)
		}
		defer func() { _ = a.Stop(ctx) }()
		if err := a.Start(ctx); err != nil {
			return err
		}
		row = runAgents(ctx, "http://"+a.APIAddr().String()+"/v1", gatewayKey, calls, !plain)
		return nil
	}, &row)
	return row, err
}

// runAgents runs gatewayAgents agents, each making calls sequential calls
// to baseURL with key (announcing their timeout as X-LLMQ-Deadline when
// announce says so), and returns what they saw.
func runAgents(ctx context.Context, baseURL, key string, calls int, announce bool) GatewayRow {
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = baseURL
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = gatewayAgents
	var rt http.RoundTripper = t
	if announce {
		rt = deadlineTransport{t}
	}
	cfg.HTTPClient = &http.Client{Timeout: gatewayTimeout, Transport: rt}
	client := openai.NewClientWithConfig(cfg)

	var (
		mu        sync.Mutex
		row       = GatewayRow{Errors: map[string]int{}}
		latencies []time.Duration
		wg        sync.WaitGroup
	)
	began := time.Now()
	for agent := range gatewayAgents {
		wg.Go(func() {
			for call := range calls {
				// The simulator's answer length follows the prompt: each
				// call asks its own question.
				req := openai.ChatCompletionRequest{Model: Primary, MaxCompletionTokens: gatewayMaxTokens,
					Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser,
						Content: fmt.Sprintf("Agent %d, step %d: plan the next step of the task.", agent, call)}}}
				start := time.Now()
				_, err := client.CreateChatCompletion(ctx, req)
				took := time.Since(start)
				mu.Lock()
				row.Calls++
				if err != nil {
					row.Failures++
					row.Errors[failureKind(err)]++
				} else {
					latencies = append(latencies, took)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	row.Took = time.Since(began)
	row.P50, row.P99 = workload.Percentile(latencies, 0.5), workload.Percentile(latencies, 0.99)
	return row
}

// deadlineTransport tells llmq the agent's timeout (the simulator ignores
// the header).
type deadlineTransport struct{ next http.RoundTripper }

func (d deadlineTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(api.HeaderDeadline, strconv.Itoa(int(gatewayTimeout.Seconds())))
	return d.next.RoundTrip(r)
}

// failureKind names a failed call: its HTTP status (with llmq's code for
// a deadline 429), a timeout or a connection error.
func failureKind(err error) string {
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	var netErr net.Error
	switch {
	case errors.As(err, &apiErr):
		if code, ok := apiErr.Code.(string); ok && code == api.CodeDeadlineUnmeetable {
			return "429 " + code
		}
		return strconv.Itoa(apiErr.HTTPStatusCode)
	case errors.As(err, &reqErr):
		return strconv.Itoa(reqErr.HTTPStatusCode)
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	}
	return "connection error"
}
