package dlq

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/llmq/llmq/store"
)

// The job store is one the Writer and the Service can use.
var _ Store = (*store.DeadLetters)(nil)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
