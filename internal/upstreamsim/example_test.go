package upstreamsim_test

import (
	"context"
	"fmt"

	openai "github.com/sashabaranov/go-openai"

	"github.com/llmq/llmq/internal/upstreamsim"
)

func Example() {
	sim, err := upstreamsim.New(upstreamsim.Config{
		Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: 60, TPM: 10_000}},
		Output:  upstreamsim.OutputConfig{Distribution: upstreamsim.DistFixed, Min: 1, Max: 100, Mean: 5},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	root, err := sim.Start(ctx, "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer func() { _ = sim.Stop(ctx) }()

	cfg := openai.DefaultConfig("sk-any")
	cfg.BaseURL = root + "/v1"
	client := openai.NewClientWithConfig(cfg)
	resp, err := client.CreateChatCompletion(ctx, openai.ChatCompletionRequest{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "Hello"}},
		//lint:ignore SA1019 the simulator must accept max_tokens, which clients still send
		MaxTokens: 20,
	})
	if err != nil {
		panic(err)
	}
	rl := resp.GetRateLimitHeaders()
	fmt.Println(resp.Usage.PromptTokens, resp.Usage.CompletionTokens, rl.RemainingRequests, rl.RemainingTokens)
	fmt.Println(sim.Stats().Models["gpt-4o-mini"].Accepted)
	// Output:
	// 8 5 59 9972
	// 1
}
