// Package upstreamsim is an OpenAI-compatible upstream simulator with real
// rate limits, a latency model, fault injection and the Batch API.
//
// Every llmq test, the demo and the benchmarks run against it, and quota
// utilisation is measured from its side (Stats, GET /sim/stats, /metrics)
// rather than from llmq's own counters.
//
// # Endpoints
//
//   - POST /v1/chat/completions: non-streaming and stream=true (SSE, the
//     first chunk after the time to first token, one per token after it,
//     stream_options.include_usage and a final "data: [DONE]";
//     WithStreamHook holds a stream or ends it with an error event).
//   - GET /v1/models, GET /v1/models/{model}.
//   - Files: POST /v1/files (multipart, purpose=batch), GET /v1/files,
//     GET /v1/files/{id}, GET /v1/files/{id}/content, DELETE /v1/files/{id}.
//   - Batches: POST /v1/batches, GET /v1/batches (after/limit),
//     GET /v1/batches/{id}, POST /v1/batches/{id}/cancel.
//   - Admin: GET /sim/stats, POST /sim/reset, GET and POST /sim/limits,
//     GET /metrics (Prometheus).
//
// In Azure mode chat completions are also served under
// /openai/deployments/{deployment}/chat/completions and the key is read from
// the api-key header.
//
// # Rate limits
//
// Limits apply per (API key, model). RPM and TPM are continuously refilling
// token buckets: capacity is the per-minute limit and the bucket refills at
// limit/60 per second, starting full. A request is charged at admission:
// one request against RPM and prompt tokens + max output tokens (ChargeSum)
// or the larger of the two (ChargeMax) against TPM. The reservation is kept
// (OpenAI does not refund) unless Config.TrueUp is set. A request rejected by
// TPM, by the concurrency cap or by the burst limit still consumes its RPM
// unit; a request rejected by RPM finds the request bucket empty and cannot
// drain it further. A request whose charge exceeds the whole TPM limit is
// answered with the permanent "Request too large" 429.
//
// Because buckets start full, a client sending at twice the RPM gets the
// full bucket plus one minute of refill in its first minute, then exactly
// the RPM per minute (TestLimiterTwiceRPM, TestLimiterTwiceTPM).
//
// MaxConcurrency caps in-flight requests; BurstGrowth caps how fast the
// admitted request rate may rise from one second to the next (OpenAI
// slow_down, DashScope limit_burst_rate).
//
// Config.Enforcement selects the kind of provider. minute (the default) is
// the above: a client may spend the whole minute at once. short enforces
// each limit with a bucket of only Config.ShortBucket of refill (5 s by
// default; at least one request), starting full and refilling at limit/60
// per second, as OpenAI documents its limits may be quantized ("60,000
// requests/minute may be enforced as 1,000 requests/second"). A request
// larger than the short bucket is admitted when it is full and leaves it in
// debt, so one large request still fits. The x-ratelimit-* headers and the
// 429 message's Used keep the per-minute view, so
// x-ratelimit-remaining-tokens can look high while a burst is refused
// (TestShortEnforcement); Retry-After is the wait for the short bucket.
//
// Successful responses carry the six x-ratelimit-* headers (resets as Go
// durations: the time until the bucket is full again), x-request-id
// (req_<32 hex>), openai-processing-ms and openai-version. A 429 carries
// retry-after in whole seconds (rounded up), retry-after-ms in Azure mode,
// and the rate-limit headers unless Config.OmitRateLimitHeadersOn429.
// Config.RateLimitHeaders none sends no x-ratelimit-* header on any answer
// (a provider without them); Retry-After is unaffected.
//
// # Batch API
//
// A batch stays validating for BatchConfig.Validating, then either fails
// (errors.data: empty_file, too_many_tasks, invalid_json_line,
// duplicate_custom_id, missing_required_parameter, invalid_method,
// url_mismatch, model_mismatch, token_limit_exceeded) or runs its lines at
// LinesPerSecond, finalizes for Finalizing and completes. Lines whose body
// is invalid get an HTTP error in the error file. At the completion window
// an unfinished batch expires: finished lines go to the output file, the
// others become batch_expired lines of the error file. A cancelled batch
// stays cancelling for Cancelling and then holds the lines finished before
// the cancel; unstarted lines appear in neither file. Output and error
// files have purpose batch_output and their lines are shuffled. Batches do
// not use the synchronous RPM/TPM, and are billed at 50%.
//
// # Testing
//
// NewTestServer starts a simulator on a random loopback port for one test;
// its URL is a go-openai BaseURL and Client returns a ready client. Pass
// WithClock(clockwork.NewFakeClockAt(t0)) to run limits, latency and batches
// in virtual time (github.com/jonboulle/clockwork); BlockUntilContext waits
// until a request is parked on the clock before the test advances it.
//
// # Time
//
// All time is read from a [github.com/jonboulle/clockwork.Clock] (WithClock).
// Limiter decisions, the quota schedule and the batch state machine are
// functions of the clock's Now, so tests drive them with a
// clockwork.FakeClock and never sleep. Batch progress is computed lazily from
// the clock whenever a batch, a file or the stats are read, so no background
// goroutine is needed.
package upstreamsim
