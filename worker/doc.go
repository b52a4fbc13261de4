// Package worker consumes job messages and runs each job against a
// rate-limited OpenAI-compatible API: decode, claim in the job store,
// optionally route to the batch lane, wait for admission in the model's
// lane (priority with aging, then shaping), call through an [Upstream],
// classify the reply, then store the result and ack.
//
// What happens after each step (retry after a delay, fall back to another
// model, dead-letter, fail, succeed, expire) is decided by one pure
// function of the job's state and the step's facts, so the policy is tested
// as a table without any service; docs/worker-policy.md describes it. The
// worker's only dependencies are small interfaces: [JobStore] (Postgres in
// production), [Upstream] ([OpenAIUpstream]), [DeadLetterer], [Router] and
// a transport.Subscriber. Its time is one clockwork.Clock (Config.Clock).
package worker
