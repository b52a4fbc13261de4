// Package dlq handles the jobs llmq gives up on: dead-letter records, the
// alerts that tell a person about them, and replay.
//
// # Dead letters
//
// A job is dead-lettered when retrying it cannot help: a poison message that
// does not decode or validate ([ReasonPoison]), retries exhausted on a
// retryable upstream error ([ReasonRetriesExhausted]), a permanent upstream
// error ([ReasonPermanentError]) or a deadline passed before the job started
// ([ReasonExpired]). Every dead letter carries its reason class, the last
// error, the model and the time, so that a burst can be told apart by cause
// and owner.
//
// # Alerts
//
// An [Alerter] turns dead-letter [Event]s into notifications a person reads.
// The worker hands events over with [Alerter.Notify], which never blocks: the
// events go into a bounded buffer and are dropped (and counted in
// llmq_alerts_dropped_total) when it is full. The alerter groups events by
// reason and tenant into bursts, the way Alertmanager groups alerts:
//
//   - the first event of a burst opens a group; its first ("firing")
//     notification leaves GroupWait later, with everything that arrived in
//     between;
//   - later events of the same burst are reported at most once per
//     GroupInterval, as an update of the same alert;
//   - when no event has arrived for ResolveTimeout the burst is over and one
//     "resolved" notification closes it; the next event opens a new burst.
//
// All notifications together are limited to MaxPerMinute in any minute; a
// notification over the limit waits for room (it is delayed, never dropped).
// Each notification goes to every configured sink: an Alertmanager
// (POST <url>/api/v2/alerts, alertname LLMQDeadLetters) and a generic JSON
// webhook in the Slack incoming-webhook shape ({"text": ..., "blocks": ...}).
// A firing Alertmanager alert carries an endsAt one GroupInterval past the
// moment the burst would resolve, so Alertmanager resolves it by itself if
// the alerter dies; a resolved alert carries the moment of resolution.
// Each sink delivers on its own goroutine, retries network errors, 408, 429
// (honouring Retry-After) and 5xx with exponential backoff up to MaxAttempts,
// and finally logs the failure and counts it in llmq_alerts_failed_total.
// Delivered notifications are counted in llmq_alerts_sent_total{sink,state}.
//
// All timing goes through an injected [Clock], so tests drive bursts,
// resolution and retry backoff on a virtual clock without sleeping.
// [Alerter.Start] runs the alerter in the background; [Alerter.Stop] sends a
// firing notification for every burst with unreported events and waits for
// the sinks to deliver them, within its context.
//
// # Replay
//
// A dead letter can be replayed once the cause is fixed: it is republished to
// the main queue with its attempts reset, idempotently, so that replaying the
// same letter twice gives one new attempt.
package dlq
