// Package producer publishes llmq jobs to Kafka or RabbitMQ with
// backpressure and a transactional outbox.
//
// # Publishing
//
// [Producer.Publish] and [Producer.PublishBatch] validate each job
// (Normalize, then Validate; a job exactly as llmq.Decode returned it is
// not validated again), encode it and check the size of the bytes
// that will be published (MaxMessageBytes, and the broker's own limit when
// the publisher knows it: a *llmq.TooLargeError, nothing recorded), admit
// it against the queue's backpressure, record it as queued in Postgres and
// publish it (Kafka: key = the job id by default, or its tenant
// (Config.KeyBy), value = the job's JSON; RabbitMQ: persistent, confirmed,
// priority high 9 / normal 5 / low 1). The row is inserted with
// published_at set, in a transaction that commits once the broker
// confirmed: one write per job. Concurrent calls share one transaction and
// one publish.
//
// [Producer.PublishBatch] checks in this order, recording nothing for the
// first four: ErrTooManyJobs; a *JobError wrapping the job's
// *llmq.ValidationError or *llmq.TooLargeError (the API answers 413 with the
// limit); ErrBrokerUnavailable or ErrDatabaseUnavailable (the queue could
// not be measured); *ErrBackpressure (queue full, or a deadline the
// estimated wait passes). Then the transaction (ErrDatabaseUnavailable, or
// store.ErrInvalidJob for data Postgres refuses) and the publish
// (ErrUnpublished, see Outbox).
//
// # Outbox
//
// When the publish fails (a broker outage), the rows are committed all the
// same, with published_at NULL (ErrUnpublished). [Producer.Sweep], run
// periodically by a [Sweeper] (llmq api runs one), republishes such rows
// once they are older than a grace period. A crash before the commit
// leaves no row; a message the broker had confirmed is recorded by the
// worker when it ingests it. A message may therefore reach the broker
// twice; the worker ingests jobs idempotently by id, so the job runs once.
// A row whose message the broker refuses for itself (too large, invalid)
// is handed to Config.DeadLetters (a dlq.Writer) as a dead letter with
// reason unpublishable, so it does not block the rows after it.
//
// # Backpressure
//
// [Producer.Queue] reports the queue as a [QueueState], cached for DepthTTL
// (PublishBatch admits by an expired one for up to ProbeTimeout while one
// goroutine measures again; [Producer.Drain] waits for it):
// the broker figure of the [DepthProbe] (Kafka consumer-group lag, RabbitMQ
// ready messages), the jobs queued and in flight in Postgres (the depth is
// the larger of the broker's and the queued figure, plus those in flight:
// a job the producer records is in both until a worker ingests it), the
// completion rate of all workers (jobs finished per minute over RateWindow,
// from Postgres), the estimated drain time (depth divided by that rate, or
// by QuotaRatePerMin before any job finished) and a state: ok below
// SoftDepth, throttled from SoftDepth (jobs are accepted), rejecting from
// HardDepth (Publish returns an [*ErrBackpressure] carrying a RetryAfter),
// no_consumer when jobs have waited NoConsumerAfter with no worker consuming
// (accepted, with no drain estimate). A job whose deadline
// falls before the estimated drain time is refused the same way at once
// (reason deadline) rather than queued to expire.
//
// Each tenant is admitted by its own share of the queue first
// ([TenantQueue], docs/design/admission.md): its weight among the tenants
// holding jobs gives it a soft and a hard share of SoftDepth and HardDepth
// (or Config.Tenants sets them), and a tenant at its hard share is refused
// (reason tenant_queue_full) while the others are accepted; the queue's
// HardDepth is the last resort. [Producer.QueueOf] and [Producer.Tenants]
// report a tenant's part, and the deadline check uses the tenant's drain.
package producer
