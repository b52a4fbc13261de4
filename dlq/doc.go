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
// # Recording and publishing
//
// A [Writer] implements the worker's DeadLetterer. [Writer.DeadLetter]
// first records the [Letter] in Postgres (table dead_letters) under a unique
// letter key (the job id, or a hash of the key and body of a poison message
// without one), so a letter handed over again after a redelivery is the same
// row. It then publishes the original key, body and headers to the
// dead-letter topic or queue, Destination+".dlq", adding x-llmq-reason,
// x-llmq-attempts, x-llmq-last-error, x-llmq-source and
// x-llmq-dead-letter-id; records the confirmed publish (published_at); marks
// the job dead_lettered; and notifies the [Alerter] once per letter.
//
// The two copies are kept consistent by ordering: the row comes first, and
// a failed publish is returned to the worker, which leaves the message
// unacknowledged so that the broker delivers it again and the next call
// publishes the same row. Rows whose publish stays unconfirmed longer than
// RepairAfter (the worker died in between) are published by
// [Writer.Repair], which a started Writer runs every RepairInterval, or
// dropped if the job has since finished in another state. A DLQ consumer may
// see a letter twice (at-least-once); x-llmq-dead-letter-id tells them apart.
// Counters: llmq_dlq_letters_recorded_total{reason},
// llmq_dlq_letters_published_total, llmq_dlq_publish_failures_total,
// llmq_dlq_repaired_total, llmq_dlq_replays_total.
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
// All timing goes through an injected clock ([github.com/jonboulle/clockwork.Clock],
// [AlertConfig.Clock] and [Config.Clock]), so tests drive bursts, resolution,
// retry backoff and repair passes on clockwork's fake clock without sleeping.
// [Alerter.Start] runs the alerter in the background; [Alerter.Stop] sends a
// firing notification for every burst with unreported events and waits for
// the sinks to deliver them, within its context.
//
// # Replay
//
// A dead letter can be replayed once the cause is fixed ([Service.Replay],
// `llmq dlq replay`, POST /v1/dead-letters/{id}/replay): its original
// message is republished to the main topic or queue (with an
// x-llmq-replay-of header) and its job moved from dead_lettered back to
// queued with its attempts reset, the one exit from a terminal state. A
// conditional update on replayed_at lets exactly one caller begin the
// replay, so replaying the same letter twice gives one new attempt; a replay
// whose publish failed is finished by [Writer.Repair]. If the job is
// dead-lettered again, that is a new letter. [Service.Purge] deletes letters
// and refuses a filter that selects nothing explicitly. The API
// (internal/app/api) serves them over HTTP, tenant-scoped, as [View]s.
package dlq
