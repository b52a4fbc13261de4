// Package soak is `llmq soak`: every promise of llmq checked at once under
// overlapping faults, chosen at random and replayable from a seed (the
// nemesis and checker of Jepsen, the simulation testing of FoundationDB
// and TigerBeetle, at the scale of one machine).
//
// The driver runs the llmq binary as 3 workers and 2 API replicas, each
// reaching Postgres and RabbitMQ through a chaos proxy (internal/chaos);
// Kafka (kfake) and the simulator (internal/upstreamsim) run in-process,
// the simulator behind a front (front.go) that injects provider faults at
// run time and counts every call by job and tenant from the headers the
// worker sends (worker.HeaderJob, worker.HeaderTenant). The load
// (load.go) submits jobs of four tenants through the API, straight to
// both brokers, as gateway calls and as duplicates. The nemesis
// (nemesis.go, Plan) is a function of the seed: every fault kind at least
// three times, in overlapping bursts. After the load and a drain the
// checker (check.go) reads Postgres, the front's accounting and each
// process's log and RSS, and reports a figure per promise; Report.Failures
// names the thresholds missed.
//
// A Postgres outage is the proxy cut (every connection reset, new ones
// refused until restored: what clients see of a restart) rather than a
// restart of the machine's server, which other users of the server share.
// Kafka's brokers are not cut: kfake's brokers advertise their own
// addresses, which a proxy cannot stand in front of.
package soak
