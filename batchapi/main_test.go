package batchapi

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/llmq/llmq/store"
)

// The job store is one the batch lane can use.
var _ Store = (*store.Batches)(nil)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pgx pools closed in t.Cleanup finish their background health
		// check goroutine asynchronously.
		goleak.IgnoreTopFunction("github.com/jackc/puddle/v2.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}
