// Package llmq is the job contract of llmq: the [Job] a producer publishes to
// Kafka or RabbitMQ, its JSON wire format, its validation, and the [Status]
// lifecycle a job moves through in Postgres.
//
// The wire format mirrors a Batch API input line: [Job.ID] is the batch
// custom_id and [Job.Body] is an OpenAI chat-completions request passed through
// unchanged (except "model" on fallback), so a job can move to a provider batch
// without translation.
//
// Decoding never panics: [Decode] either returns a valid job or a
// [*ValidationError] that names every failing field by its JSON path.
package llmq
