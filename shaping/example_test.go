package shaping_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq/shaping"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// A bucket with debt: reservations beyond the level queue, first-in first-out.
func ExampleBucket() {
	b, _ := shaping.NewBucket(shaping.BucketConfig{Name: "rpm", Limit: 60, Capacity: 2}, start)
	for range 4 {
		c, _ := b.ReserveAt(start, 1)
		fmt.Println(c.ReadyAt.Sub(start))
	}
	fmt.Println(b.LevelAt(start))
	// Output:
	// 0s
	// 0s
	// 1s
	// 2s
	// -2
}

// Admission on a lane, then settlement to the real usage.
func ExampleLane_Admit() {
	clock := clockwork.NewFakeClockAt(start)
	lane, _ := shaping.NewLane(shaping.LaneConfig{
		Name: "key/gpt-4o-mini", Strategy: shaping.StrategyShape,
		RPM: 60, TPM: 10_000, WarmUp: -1, Clock: clock,
	})
	p, err := lane.Admit(context.Background(), shaping.Request{PromptTokens: 1200, MaxOutputTokens: 800})
	if err != nil {
		panic(err)
	}
	fmt.Println("reserved", p.Tokens())
	_ = p.Done(shaping.Outcome{PromptTokens: 1200, CompletionTokens: 300, Latency: 2 * time.Second})
	for _, b := range lane.Snapshot().Buckets {
		fmt.Printf("%s %.0f/%.0f\n", b.Name, b.Level, b.Capacity)
	}

	// Too large for the TPM bucket: permanent.
	_, err = lane.Admit(context.Background(), shaping.Request{PromptTokens: 20_000})
	fmt.Println(errors.Is(err, shaping.ErrTooLarge))
	// Output:
	// reserved 2000
	// rpm 59/60
	// tpm 8500/10000
	// true
}

// A wait past the deadline fails at once with the predicted wait.
func ExampleWaitError() {
	clock := clockwork.NewFakeClockAt(start)
	lane, _ := shaping.NewLane(shaping.LaneConfig{Strategy: shaping.StrategyRPM, RPM: 60, Concurrency: 4, Start: shaping.StartEmpty, Clock: clock})
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(500*time.Millisecond))
	defer cancel()
	_, err := lane.Admit(ctx, shaping.Request{PromptTokens: 10})
	var we *shaping.WaitError
	if errors.As(err, &we) {
		fmt.Println("retry after", we.RetryAfter())
	}
	// Output:
	// retry after 1s
}

// The default strategy follows whether quotas are known.
func ExampleDefaultStrategy() {
	fmt.Println(shaping.DefaultStrategy(500, 0), shaping.DefaultStrategy(0, 0))
	// Output: shape adaptive
}
