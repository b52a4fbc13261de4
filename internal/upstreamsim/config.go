package upstreamsim

import (
	"cmp"
	"fmt"
	"sort"
	"time"
)

// Mode selects the provider whose error bodies and headers are imitated.
type Mode string

// Modes.
const (
	// ModeOpenAI imitates api.openai.com (default).
	ModeOpenAI Mode = "openai"
	// ModeAzure imitates Azure OpenAI: api-key auth, retry-after-ms on 429,
	// a string "429" code without type, deployment-style paths.
	ModeAzure Mode = "azure"
	// ModeDashScope imitates Alibaba DashScope's OpenAI-compatible mode:
	// codes limit_requests, insufficient_quota (TPM, retryable) and
	// limit_burst_rate, param "" and X-DashScope-Wait-Timeout queueing.
	ModeDashScope Mode = "dashscope"
)

// ChargeMode says how a request's TPM charge is computed at admission.
type ChargeMode string

// Charge modes.
const (
	// ChargeSum charges prompt tokens + n * max output tokens (default).
	ChargeSum ChargeMode = "sum"
	// ChargeMax charges max(prompt tokens, n * max output tokens), the
	// wording of OpenAI's rate-limit guide.
	ChargeMax ChargeMode = "max"
)

// Enforcement is how the per-minute limits are enforced.
type Enforcement string

// Enforcements.
const (
	// EnforcementMinute enforces each limit with a bucket holding one
	// minute of quota, starting full (default): a client may spend the
	// whole minute at once.
	EnforcementMinute Enforcement = "minute"
	// EnforcementShort enforces each limit with a bucket holding only
	// Config.ShortBucket of refill (limit/60 per second), starting full:
	// OpenAI's quantized limits ("60,000 requests/minute may be enforced as
	// 1,000 requests/second"). A request larger than the bucket is
	// admitted when the bucket is full and leaves it in debt. The headers
	// still report the per-minute view, so remaining can look high while a
	// burst is refused.
	EnforcementShort Enforcement = "short"
)

// HeaderMode says which rate-limit headers the answers carry.
type HeaderMode string

// Header modes.
const (
	// HeadersAll sends the six x-ratelimit-* headers (default; see also
	// Config.OmitRateLimitHeadersOn429).
	HeadersAll HeaderMode = "all"
	// HeadersNone sends no x-ratelimit-* header on any answer (a provider
	// without rate-limit headers). Retry-After on 429s is unaffected.
	HeadersNone HeaderMode = "none"
)

// Distribution names for OutputConfig.Distribution.
const (
	DistUniform   = "uniform"
	DistFixed     = "fixed"
	DistNormal    = "normal"
	DistLogNormal = "lognormal"
)

// Defaults applied by WithDefaults.
const (
	ModeDefault                   = ModeOpenAI
	OrganizationDefault           = "org-llmqsim"
	RPMDefault              int64 = 500
	TPMDefault              int64 = 200_000
	ContextWindowDefault          = 128_000
	DefaultMaxTokensDefault       = 4096
	EncodingDefault               = "o200k_base"
	BurstFloorDefault             = 1.0
	InputPerMTokDefault           = 0.15
	OutputPerMTokDefault          = 0.60
	ChargeDefault                 = ChargeSum
	EnforcementDefault            = EnforcementMinute
	ShortBucketDefault            = 5 * time.Second
	RateLimitHeadersDefault       = HeadersAll

	OutputDistributionDefault = DistUniform
	OutputMinDefault          = 16
	OutputMaxDefault          = 256

	CongestionFactorDefault = 1.0
	HangDurationDefault     = 10 * time.Minute

	BatchTimeScaleDefault        = 1.0
	BatchValidatingDefault       = 5 * time.Second
	BatchLinesPerSecondDefault   = 50.0
	BatchFinalizingDefault       = 5 * time.Second
	BatchCancellingDefault       = 10 * time.Second
	BatchCompletionWindowDefault = 24 * time.Hour
	BatchMaxLinesDefault         = 50_000
	BatchMaxFileBytesDefault     = 200 << 20
	BatchEnqueuedTokensDefault   = 2_000_000
)

// Limits are the rate limits of one model, applied per (API key, model).
type Limits struct {
	// RPM is the requests-per-minute limit. 0 means RPMDefault (500);
	// -1 means unlimited (no request headers are sent).
	RPM int64 `yaml:"rpm" json:"rpm"`
	// TPM is the tokens-per-minute limit. 0 means TPMDefault (200,000);
	// -1 means unlimited (no token headers are sent).
	TPM int64 `yaml:"tpm" json:"tpm"`
	// MaxConcurrency caps in-flight requests. 0 or -1 means no cap (default).
	MaxConcurrency int `yaml:"concurrency" json:"concurrency"`
	// BurstGrowth caps how fast the admitted rate may rise: the number of
	// requests admitted in one clock second may be at most BurstGrowth times
	// the number admitted in the previous second (or BurstFloor, whichever is
	// larger). 0 or -1 disables the burst limit (default).
	BurstGrowth float64 `yaml:"burst_growth" json:"burst_growth"`
	// BurstFloor is the number of requests per second always allowed by the
	// burst limit, even from cold. 0 means BurstFloorDefault (1).
	BurstFloor float64 `yaml:"burst_floor" json:"burst_floor"`
}

func (l Limits) withDefaults() Limits {
	l.RPM = cmp.Or(l.RPM, RPMDefault)
	l.TPM = cmp.Or(l.TPM, TPMDefault)
	l.BurstFloor = cmp.Or(l.BurstFloor, BurstFloorDefault)
	return l
}

func (l Limits) validate(path string) error {
	switch {
	case l.RPM < -1:
		return fmt.Errorf("%w: %s.rpm must be -1, 0 or positive, got %d", ErrInvalidConfig, path, l.RPM)
	case l.TPM < -1:
		return fmt.Errorf("%w: %s.tpm must be -1, 0 or positive, got %d", ErrInvalidConfig, path, l.TPM)
	case l.MaxConcurrency < -1:
		return fmt.Errorf("%w: %s.concurrency must be -1, 0 or positive, got %d", ErrInvalidConfig, path, l.MaxConcurrency)
	case l.BurstGrowth < -1 || (l.BurstGrowth > 0 && l.BurstGrowth < 1):
		return fmt.Errorf("%w: %s.burst_growth must be -1, 0 or >= 1, got %v", ErrInvalidConfig, path, l.BurstGrowth)
	case l.BurstFloor < 0:
		return fmt.Errorf("%w: %s.burst_floor must not be negative, got %v", ErrInvalidConfig, path, l.BurstFloor)
	}
	return nil
}

// Price is a model's price in USD per million tokens (synchronous API; batch
// work is billed at half of it).
type Price struct {
	// InputPerMTok is the prompt price. 0 means InputPerMTokDefault; -1 free.
	InputPerMTok float64 `yaml:"input_per_mtok" json:"input_per_mtok"`
	// OutputPerMTok is the completion price. 0 means OutputPerMTokDefault; -1 free.
	OutputPerMTok float64 `yaml:"output_per_mtok" json:"output_per_mtok"`
}

// ModelConfig describes one model. Zero fields of an entry in Config.Models
// are taken from Config.Default, then from the package defaults.
type ModelConfig struct {
	Limits `yaml:",inline"`
	// ContextWindow is the context length in tokens (prompt + max output).
	// 0 means ContextWindowDefault (128,000).
	ContextWindow int `yaml:"context_window" json:"context_window"`
	// DefaultMaxTokens is the max output assumed when a request sets neither
	// max_tokens nor max_completion_tokens. 0 means DefaultMaxTokensDefault (4096).
	DefaultMaxTokens int `yaml:"default_max_tokens" json:"default_max_tokens"`
	// Encoding is the tiktoken encoding, o200k_base or cl100k_base.
	// Empty means EncodingDefault (o200k_base).
	Encoding string `yaml:"encoding" json:"encoding"`
	// Price is the price table entry.
	Price Price `yaml:"price" json:"price"`
	// EnqueuedTokenLimit caps the prompt tokens of this model's batches in
	// progress at once (per organization). 0 means
	// BatchEnqueuedTokensDefault (2,000,000); -1 unlimited.
	EnqueuedTokenLimit int64 `yaml:"enqueued_token_limit" json:"enqueued_token_limit"`
}

func mergeModel(m, def ModelConfig) ModelConfig {
	m.RPM = cmp.Or(m.RPM, def.RPM)
	m.TPM = cmp.Or(m.TPM, def.TPM)
	m.MaxConcurrency = cmp.Or(m.MaxConcurrency, def.MaxConcurrency)
	m.BurstGrowth = cmp.Or(m.BurstGrowth, def.BurstGrowth)
	m.BurstFloor = cmp.Or(m.BurstFloor, def.BurstFloor)
	m.ContextWindow = cmp.Or(m.ContextWindow, def.ContextWindow)
	m.DefaultMaxTokens = cmp.Or(m.DefaultMaxTokens, def.DefaultMaxTokens)
	m.Encoding = cmp.Or(m.Encoding, def.Encoding)
	m.Price.InputPerMTok = cmp.Or(m.Price.InputPerMTok, def.Price.InputPerMTok)
	m.Price.OutputPerMTok = cmp.Or(m.Price.OutputPerMTok, def.Price.OutputPerMTok)
	m.EnqueuedTokenLimit = cmp.Or(m.EnqueuedTokenLimit, def.EnqueuedTokenLimit)
	return m
}

func (m ModelConfig) withDefaults() ModelConfig {
	m.Limits = m.Limits.withDefaults()
	m.ContextWindow = cmp.Or(m.ContextWindow, ContextWindowDefault)
	m.DefaultMaxTokens = cmp.Or(m.DefaultMaxTokens, DefaultMaxTokensDefault)
	m.Encoding = cmp.Or(m.Encoding, EncodingDefault)
	m.Price.InputPerMTok = cmp.Or(m.Price.InputPerMTok, InputPerMTokDefault)
	m.Price.OutputPerMTok = cmp.Or(m.Price.OutputPerMTok, OutputPerMTokDefault)
	m.EnqueuedTokenLimit = cmp.Or(m.EnqueuedTokenLimit, BatchEnqueuedTokensDefault)
	return m
}

func (m ModelConfig) validate(path string) error {
	if err := m.Limits.validate(path); err != nil {
		return err
	}
	switch {
	case m.ContextWindow < 0:
		return fmt.Errorf("%w: %s.context_window must not be negative", ErrInvalidConfig, path)
	case m.DefaultMaxTokens < 0:
		return fmt.Errorf("%w: %s.default_max_tokens must not be negative", ErrInvalidConfig, path)
	case m.Encoding != "" && m.Encoding != "o200k_base" && m.Encoding != "cl100k_base":
		return fmt.Errorf("%w: %s.encoding must be o200k_base or cl100k_base, got %q", ErrInvalidConfig, path, m.Encoding)
	case m.EnqueuedTokenLimit < -1:
		return fmt.Errorf("%w: %s.enqueued_token_limit must be -1, 0 or positive", ErrInvalidConfig, path)
	}
	return nil
}

// LatencyConfig is the latency model: a request takes TTFT plus PerToken for
// each output token. When the model's in-flight requests (all keys) exceed
// Capacity, the time per token grows to
// PerToken * (1 + CongestionFactor * (inflight - Capacity) / Capacity),
// so time per token is a real congestion signal. All zero (default) means
// instant answers.
type LatencyConfig struct {
	// TTFT is the time to first token. Default 0.
	TTFT time.Duration `yaml:"ttft" json:"ttft"`
	// PerToken is the time per output token. Default 0.
	PerToken time.Duration `yaml:"per_token" json:"per_token"`
	// Capacity is the number of in-flight requests per model served without
	// slowdown. 0 or -1 means no congestion (default).
	Capacity int `yaml:"capacity" json:"capacity"`
	// CongestionFactor scales the slowdown above Capacity. 0 means
	// CongestionFactorDefault (1).
	CongestionFactor float64 `yaml:"congestion_factor" json:"congestion_factor"`
}

// OutputConfig is the distribution of completion lengths, drawn
// deterministically from the seed and the request, then capped by
// max_tokens / max_completion_tokens (finish_reason "length" when capped).
type OutputConfig struct {
	// Distribution is uniform (default), fixed, normal or lognormal.
	Distribution string `yaml:"distribution" json:"distribution"`
	// Min is the smallest length (uniform) and the floor of the others.
	// 0 means OutputMinDefault (16); -1 means 1.
	Min int `yaml:"min" json:"min"`
	// Max is the largest length (uniform) and the ceiling of the others.
	// 0 means OutputMaxDefault (256).
	Max int `yaml:"max" json:"max"`
	// Mean is the mean for fixed (the length), normal and lognormal.
	// 0 means (Min+Max)/2.
	Mean float64 `yaml:"mean" json:"mean"`
	// StdDev is the standard deviation for normal and lognormal. 0 means Mean/4.
	StdDev float64 `yaml:"stddev" json:"stddev"`
}

// FaultKind names an injected fault.
type FaultKind string

// Fault kinds.
const (
	FaultServerError       FaultKind = "server_error"       // 500 server_error
	FaultBadGateway        FaultKind = "bad_gateway"        // 502 Cloudflare-style HTML page
	FaultOverloaded        FaultKind = "overloaded"         // 503 server_is_overloaded
	FaultTimeout           FaultKind = "timeout"            // 408
	FaultConflict          FaultKind = "conflict"           // 409
	FaultGatewayTimeout    FaultKind = "gateway_timeout"    // 504 Cloudflare-style HTML page
	FaultConnectionReset   FaultKind = "connection_reset"   // TCP reset, no response
	FaultHang              FaultKind = "hang"               // no answer until the client gives up (or HangDuration)
	FaultSlowDown          FaultKind = "slow_down"          // 429 slow_down
	FaultInsufficientQuota FaultKind = "insufficient_quota" // 429 insufficient_quota (not retryable on OpenAI)
)

// FaultKinds lists every fault kind in a fixed order.
var FaultKinds = []FaultKind{
	FaultServerError, FaultBadGateway, FaultOverloaded, FaultTimeout, FaultConflict,
	FaultGatewayTimeout, FaultConnectionReset, FaultHang, FaultSlowDown, FaultInsufficientQuota,
}

// FaultConfig sets fault injection on chat completions.
type FaultConfig struct {
	// Rates maps a fault kind to its probability per request (0..1). The sum
	// must not exceed 1. Empty means no faults (default).
	Rates map[FaultKind]float64 `yaml:"rates" json:"rates"`
	// Models restricts faults to these models. Empty means every model.
	Models []string `yaml:"models" json:"models"`
	// HangDuration bounds a hang when the client never gives up.
	// 0 means HangDurationDefault (10m).
	HangDuration time.Duration `yaml:"hang_duration" json:"hang_duration"`
	// ShouldRetryFalse adds x-should-retry: false to insufficient_quota 429s.
	// Default false (real OpenAI behaviour unverified).
	ShouldRetryFalse bool `yaml:"should_retry_false" json:"should_retry_false"`
}

// BatchConfig sets the speed of the Batch API. Durations are in simulated
// time and divided by TimeScale to get clock time.
type BatchConfig struct {
	// TimeScale divides every batch duration: 1000 runs a 24h window in
	// 86.4s. 0 means BatchTimeScaleDefault (1).
	TimeScale float64 `yaml:"time_scale" json:"time_scale"`
	// Validating is the time spent in validating. 0 means 5s.
	Validating time.Duration `yaml:"validating" json:"validating"`
	// LinesPerSecond is the processing speed in simulated time. 0 means 50.
	LinesPerSecond float64 `yaml:"lines_per_second" json:"lines_per_second"`
	// Finalizing is the time spent in finalizing. 0 means 5s.
	Finalizing time.Duration `yaml:"finalizing" json:"finalizing"`
	// Cancelling is the time spent in cancelling (in-flight lines finish).
	// 0 means 10s; real OpenAI takes up to 10 minutes.
	Cancelling time.Duration `yaml:"cancelling" json:"cancelling"`
	// CompletionWindow is the 24h window after which a batch expires.
	// 0 means 24h.
	CompletionWindow time.Duration `yaml:"completion_window" json:"completion_window"`
	// MaxLines caps the requests per batch. 0 means 50,000.
	MaxLines int `yaml:"max_lines" json:"max_lines"`
	// MaxFileBytes caps the size of an uploaded file. 0 means 200 MiB.
	MaxFileBytes int64 `yaml:"max_file_bytes" json:"max_file_bytes"`
}

// ScheduleEntry changes a model's limits at an offset from the server's
// creation, to test adaptation when the platform's limit moves.
type ScheduleEntry struct {
	// At is the offset from New.
	At time.Duration `yaml:"at" json:"at"`
	// Model is the model whose limits change; "" or "*" means the default
	// applied to every model without its own entry.
	Model string `yaml:"model" json:"model"`
	// Limits replaces the model's limits; zero fields keep the value in
	// force (see Server.SetLimits).
	Limits Limits `yaml:"limits" json:"limits"`
}

// Config configures a Server. The zero value is usable: any key, any model,
// 500 RPM and 200,000 TPM per (key, model), instant answers, no faults.
type Config struct {
	// Mode is openai (default), azure or dashscope.
	Mode Mode `yaml:"mode" json:"mode"`
	// Organization appears in 429 messages. Empty means "org-llmqsim".
	Organization string `yaml:"organization" json:"organization"`
	// APIKeys, when not empty, are the only keys accepted (401 otherwise).
	// Empty means any key, even none (default).
	APIKeys []string `yaml:"api_keys" json:"api_keys"`
	// Default applies to every model name without an entry in Models.
	Default ModelConfig `yaml:"default" json:"default"`
	// Models holds per-model settings; zero fields come from Default.
	Models map[string]ModelConfig `yaml:"models" json:"models"`
	// RestrictModels answers 404 model_not_found for names not in Models.
	RestrictModels bool `yaml:"restrict_models" json:"restrict_models"`
	// Charge is sum (default) or max; see ChargeMode.
	Charge ChargeMode `yaml:"charge" json:"charge"`
	// TrueUp refunds the unused part of the TPM reservation once the
	// completion is known. Default false: OpenAI keeps the reservation.
	TrueUp bool `yaml:"true_up" json:"true_up"`
	// Enforcement is minute (default) or short; see Enforcement.
	Enforcement Enforcement `yaml:"enforcement" json:"enforcement"`
	// ShortBucket is how much refill a short bucket holds (Enforcement
	// short): limit/60 x ShortBucket, at least one request. 0 means
	// ShortBucketDefault (5s).
	ShortBucket time.Duration `yaml:"short_bucket" json:"short_bucket"`
	// RateLimitHeaders is all (default) or none; see HeaderMode.
	RateLimitHeaders HeaderMode `yaml:"rate_limit_headers" json:"rate_limit_headers"`
	// OmitRateLimitHeadersOn429 drops the x-ratelimit-* headers from 429s.
	OmitRateLimitHeadersOn429 bool `yaml:"omit_rate_limit_headers_on_429" json:"omit_rate_limit_headers_on_429"`
	// OmitRetryAfterOn429 drops retry-after (and retry-after-ms) from 429s.
	OmitRetryAfterOn429 bool `yaml:"omit_retry_after_on_429" json:"omit_retry_after_on_429"`
	// Latency is the latency model.
	Latency LatencyConfig `yaml:"latency" json:"latency"`
	// Output is the completion length distribution.
	Output OutputConfig `yaml:"output" json:"output"`
	// Faults sets fault injection.
	Faults FaultConfig `yaml:"faults" json:"faults"`
	// Batch sets the speed of the Batch API.
	Batch BatchConfig `yaml:"batch" json:"batch"`
	// Schedule changes limits at run time, relative to New.
	Schedule []ScheduleEntry `yaml:"schedule" json:"schedule"`
	// Seed makes completions, faults and output order deterministic.
	// 0 is a valid seed.
	Seed uint64 `yaml:"seed" json:"seed"`
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Mode = cmp.Or(c.Mode, ModeDefault)
	c.Organization = cmp.Or(c.Organization, OrganizationDefault)
	c.Default = c.Default.withDefaults()
	if c.Models != nil {
		models := make(map[string]ModelConfig, len(c.Models))
		for name, m := range c.Models {
			models[name] = mergeModel(m, c.Default)
		}
		c.Models = models
	}
	c.Charge = cmp.Or(c.Charge, ChargeDefault)
	c.Enforcement = cmp.Or(c.Enforcement, EnforcementDefault)
	c.ShortBucket = cmp.Or(c.ShortBucket, ShortBucketDefault)
	c.RateLimitHeaders = cmp.Or(c.RateLimitHeaders, RateLimitHeadersDefault)
	c.Latency.CongestionFactor = cmp.Or(c.Latency.CongestionFactor, CongestionFactorDefault)
	c.Output.Distribution = cmp.Or(c.Output.Distribution, OutputDistributionDefault)
	c.Output.Min = cmp.Or(c.Output.Min, OutputMinDefault)
	if c.Output.Min == -1 {
		c.Output.Min = 1
	}
	c.Output.Max = cmp.Or(c.Output.Max, OutputMaxDefault)
	c.Output.Mean = cmp.Or(c.Output.Mean, float64(c.Output.Min+c.Output.Max)/2)
	c.Output.StdDev = cmp.Or(c.Output.StdDev, c.Output.Mean/4)
	c.Faults.HangDuration = cmp.Or(c.Faults.HangDuration, HangDurationDefault)
	c.Batch.TimeScale = cmp.Or(c.Batch.TimeScale, BatchTimeScaleDefault)
	c.Batch.Validating = cmp.Or(c.Batch.Validating, BatchValidatingDefault)
	c.Batch.LinesPerSecond = cmp.Or(c.Batch.LinesPerSecond, BatchLinesPerSecondDefault)
	c.Batch.Finalizing = cmp.Or(c.Batch.Finalizing, BatchFinalizingDefault)
	c.Batch.Cancelling = cmp.Or(c.Batch.Cancelling, BatchCancellingDefault)
	c.Batch.CompletionWindow = cmp.Or(c.Batch.CompletionWindow, BatchCompletionWindowDefault)
	c.Batch.MaxLines = cmp.Or(c.Batch.MaxLines, BatchMaxLinesDefault)
	c.Batch.MaxFileBytes = cmp.Or(c.Batch.MaxFileBytes, BatchMaxFileBytesDefault)
	return c
}

// Validate reports the first invalid field of c (after WithDefaults, zero
// fields are valid), naming it.
func (c Config) Validate() error {
	for _, check := range []func() error{c.validateModes, c.validateModels, c.validateOutput, c.validateFaults} {
		if err := check(); err != nil {
			return err
		}
	}
	b := c.Batch
	if b.TimeScale < 0 || b.LinesPerSecond < 0 || b.Validating < 0 || b.Finalizing < 0 || b.Cancelling < 0 || b.CompletionWindow < 0 || b.MaxLines < 0 || b.MaxFileBytes < 0 {
		return fmt.Errorf("%w: batch.* must not be negative", ErrInvalidConfig)
	}
	for i, e := range c.Schedule {
		if e.At < 0 {
			return fmt.Errorf("%w: schedule[%d].at must not be negative", ErrInvalidConfig, i)
		}
		if err := e.Limits.validate(fmt.Sprintf("schedule[%d].limits", i)); err != nil {
			return err
		}
	}
	return nil
}

// validateModes checks the provider mode, the charge, the enforcement and the headers.
func (c Config) validateModes() error {
	switch c.Mode {
	case "", ModeOpenAI, ModeAzure, ModeDashScope:
	default:
		return fmt.Errorf("%w: mode must be openai, azure or dashscope, got %q", ErrInvalidConfig, c.Mode)
	}
	switch c.Charge {
	case "", ChargeSum, ChargeMax:
	default:
		return fmt.Errorf("%w: charge must be sum or max, got %q", ErrInvalidConfig, c.Charge)
	}
	switch c.Enforcement {
	case "", EnforcementMinute, EnforcementShort:
	default:
		return fmt.Errorf("%w: enforcement must be minute or short, got %q", ErrInvalidConfig, c.Enforcement)
	}
	if c.ShortBucket < 0 {
		return fmt.Errorf("%w: short_bucket must not be negative, got %v", ErrInvalidConfig, c.ShortBucket)
	}
	switch c.RateLimitHeaders {
	case "", HeadersAll, HeadersNone:
	default:
		return fmt.Errorf("%w: rate_limit_headers must be all or none, got %q", ErrInvalidConfig, c.RateLimitHeaders)
	}
	return nil
}

// validateModels checks the default limits and each model's.
func (c Config) validateModels() error {
	if err := c.Default.validate("default"); err != nil {
		return err
	}
	names := make([]string, 0, len(c.Models))
	for name := range c.Models {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "" {
			return fmt.Errorf("%w: models has an empty model name", ErrInvalidConfig)
		}
		if err := c.Models[name].validate("models." + name); err != nil {
			return err
		}
	}
	if c.RestrictModels && len(c.Models) == 0 {
		return fmt.Errorf("%w: restrict_models needs at least one entry in models", ErrInvalidConfig)
	}
	return nil
}

// validateOutput checks the latency model and the output-size distribution.
func (c Config) validateOutput() error {
	if c.Latency.TTFT < 0 || c.Latency.PerToken < 0 {
		return fmt.Errorf("%w: latency.ttft and latency.per_token must not be negative", ErrInvalidConfig)
	}
	if c.Latency.CongestionFactor < 0 {
		return fmt.Errorf("%w: latency.congestion_factor must not be negative", ErrInvalidConfig)
	}
	switch c.Output.Distribution {
	case "", DistUniform, DistFixed, DistNormal, DistLogNormal:
	default:
		return fmt.Errorf("%w: output.distribution must be uniform, fixed, normal or lognormal, got %q", ErrInvalidConfig, c.Output.Distribution)
	}
	if c.Output.Min < -1 || c.Output.Max < 0 || (c.Output.Max > 0 && c.Output.Min > c.Output.Max) {
		return fmt.Errorf("%w: output.min (%d) and output.max (%d) must satisfy 1 <= min <= max", ErrInvalidConfig, c.Output.Min, c.Output.Max)
	}
	if c.Output.Mean < 0 || c.Output.StdDev < 0 {
		return fmt.Errorf("%w: output.mean and output.stddev must not be negative", ErrInvalidConfig)
	}
	return nil
}

// validateFaults checks the fault rates (known kinds, in [0, 1], summing to at most 1).
func (c Config) validateFaults() error {
	var sum float64
	for kind, rate := range c.Faults.Rates {
		known := false
		for _, k := range FaultKinds {
			known = known || k == kind
		}
		if !known {
			return fmt.Errorf("%w: faults.rates has unknown kind %q", ErrInvalidConfig, kind)
		}
		if rate < 0 || rate > 1 {
			return fmt.Errorf("%w: faults.rates.%s must be in [0, 1], got %v", ErrInvalidConfig, kind, rate)
		}
		sum += rate
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("%w: faults.rates sum to %v, more than 1", ErrInvalidConfig, sum)
	}
	if c.Faults.HangDuration < 0 {
		return fmt.Errorf("%w: faults.hang_duration must not be negative", ErrInvalidConfig)
	}
	return nil
}
