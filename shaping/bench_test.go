package shaping

import (
	"runtime"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/time/rate"
)

// Admission cost, side by side with x/time/rate's Limiter.ReserveN. The
// limits are high enough that no call waits.

func benchLane(b *testing.B) *Lane {
	l, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 1e12, TPM: 1e15, WarmUp: -1, MinInterval: -1, Clock: clockwork.NewFakeClockAt(t0)})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func BenchmarkAdmission(b *testing.B) {
	req := Request{PromptTokens: 100, MaxOutputTokens: 100}
	b.Run("xrate.ReserveN/uncontended", func(b *testing.B) {
		lim := rate.NewLimiter(rate.Limit(1e12), 1e9)
		now := t0
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Nanosecond)
			_ = lim.ReserveN(now, 1)
		}
	})
	b.Run("lane.ReserveAt/uncontended", func(b *testing.B) {
		l := benchLane(b)
		now := t0
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Nanosecond)
			if _, err := l.ReserveAt(now, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bucket.ReserveAt/uncontended", func(b *testing.B) {
		bk, _ := NewBucket(BucketConfig{Limit: 1e15}, t0)
		now := t0
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Nanosecond)
			_, _ = bk.ReserveAt(now, 1)
		}
	})
	b.Run("xrate.ReserveN/parallel64", func(b *testing.B) {
		lim := rate.NewLimiter(rate.Limit(1e12), 1e9)
		b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0))) // 64 goroutines
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			now := t0
			for pb.Next() {
				now = now.Add(time.Nanosecond)
				_ = lim.ReserveN(now, 1)
			}
		})
	})
	b.Run("lane.ReserveAt/parallel64", func(b *testing.B) {
		l := benchLane(b)
		b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0))) // 64 goroutines
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			now := t0
			for pb.Next() {
				now = now.Add(time.Nanosecond)
				_, _ = l.ReserveAt(now, req)
			}
		})
	})
	b.Run("lane.Admit+Done/uncontended", func(b *testing.B) {
		l := benchLane(b)
		ctx := b.Context()
		b.ReportAllocs()
		for b.Loop() {
			p, err := l.Admit(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			_ = p.Done(Outcome{PromptTokens: 100, CompletionTokens: 50, Latency: time.Second})
		}
	})
}
