package api

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
)

// gateway serves gateway mode (docs/design/gateway.md): POST
// /v1/chat/completions enqueues a job and waits for it to end (gateway.go,
// gateway_wait.go), or streams its chunks (gateway_stream.go); GET
// /v1/models lists the catalog.
type gateway struct {
	// cfg is the part of Config the gateway reads.
	cfg gatewaySettings
	// admission reads and checks the call's job, as POST /v1/jobs does.
	admission
	// limited counts the calls refused (the door's counter).
	limited *prometheus.CounterVec
	// waitingCalls are the calls waiting, per tenant.
	waitingCalls waitingCalls
	// waiters wake the calls whose job ended, chunkWaiters those whose
	// stream grew; waiting counts the calls waiting.
	waiters, chunkWaiters waiters
	waiting               prometheus.Gauge
}

// gatewaySettings is the part of Config the gateway reads, under
// Config's names.
type gatewaySettings struct {
	Gateway  GatewayConfig
	Producer *producer.Producer
	// Store reads a call's job and cancels it when its caller leaves.
	Store interface {
		Get(ctx context.Context, tenant, id string) (*store.JobRecord, error)
		Cancel(ctx context.Context, tenant, id string) (*store.JobRecord, error)
	}
	Streams               StreamStore
	JobsDone              JobsDoneListener
	Clock                 clockwork.Clock
	MaxBodyBytes          int64
	MaxMessageBytes       int
	RetryAfterUnavailable time.Duration
}
