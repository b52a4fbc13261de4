// Package workload builds the synthetic jobs of `llmq demo` and `llmq bench`:
// short questions and long documents (the long/short mix of
// docs/design/quotas.md, the four acceptance experiments), every
// priority, deferrable jobs and malformed messages that must be
// dead-lettered as poison.
//
// Everything is a pure function of its arguments, so a run is reproducible:
// job n of a mix is always the same job.
package workload
