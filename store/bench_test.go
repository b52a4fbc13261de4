package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

// BenchmarkJobLifecycle measures one job's path through the store as the
// worker drives it: Claim (insert + claim, one round trip) then StoreResult.
func BenchmarkJobLifecycle(b *testing.B) {
	ctx := context.Background()
	s, err := store.Open(ctx, storetest.NewDB(b))
	require.NoError(b, err)
	defer s.Close()
	jobs := make([]*llmq.Job, b.N)
	for i := range jobs {
		j, err := llmq.Decode([]byte(fmt.Sprintf(`{"id":"bench-%d","body":{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":16}}`, i)), llmq.DecodeOptions{})
		require.NoError(b, err)
		jobs[i] = j
	}
	resp := json.RawMessage(`{"id":"chatcmpl-1","choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`)
	b.ResetTimer()
	for _, j := range jobs {
		if _, err := s.Claim(ctx, j, "bench", time.Minute); err != nil {
			b.Fatal(err)
		}
		if _, err := s.StoreResult(ctx, j.ID, store.Result{Response: resp, UsedModel: "m", PromptTokens: 5, CompletionTokens: 1}); err != nil {
			b.Fatal(err)
		}
	}
}
