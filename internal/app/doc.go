// Package app assembles one llmq process. From one parsed configuration
// (internal/config) it opens the store and the broker (an in-process Kafka
// cluster for "embedded"), and builds what the process runs: the worker
// with its dead-letter writer, alert sinks, upstream client and batch lane;
// the producer; the HTTP API with its outbox sweeper; the metrics registry
// and its listener. Start starts them in one ordered list and Stop stops
// them in the reverse order, each within its budget, on a context that an
// interrupt does not cancel, so final writes complete.
//
// The commands of cmd/llmq, the demo and the benchmark all call New; what
// differs between them (the demo's simulator and embedded broker, the
// benchmark's in-memory broker, per-run database and strategy) is a field
// of Config or of the settings, never a second copy of the assembly.
//
// The apps built on it live below: api (the HTTP handler), console (the
// web console over the API, mounted at /ui), demo and bench.
//
// Layers, lowest first (layers_test.go at the module root enforces them):
// the job contract, shaping and migrations; the infrastructure (store,
// transport, internal/config...); producer and dlq; worker and batchapi;
// this package and the apps under it; cmd/llmq.
package app
