package shaping

import (
	"runtime"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/time/rate"
)

// Admission cost, side by side with golang.org/x/time/rate in the same run,
// at limits where no call waits: a Lane against one and two rate.Limiters,
// uncontended and on 64 goroutines, plus the three-layer case (tenant and
// project quotas). Cases: docs/design/rate-limiting.md#benchmarkadmission.
//
//	go test -run XXX -bench Admission -benchtime=1000000x -count=6 ./shaping/

const benchTPM = 1e15

// benchReq reserves 1 request and 200 tokens.
var benchReq = Request{PromptTokens: 100, MaxOutputTokens: 100}

func benchLane(b *testing.B) *Lane {
	l, err := NewLane(LaneConfig{Strategy: StrategyShape, RPM: 1e12, TPM: benchTPM, WarmUp: -1, MinInterval: -1,
		Concurrency: 1 << 20, Clock: clockwork.NewFakeClockAt(t0)})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// threeLayers is benchReq with a tenant's and a project's RPM and TPM
// buckets, limits high enough that nothing waits.
func threeLayers(b *testing.B) Request {
	req := benchReq
	for _, name := range []string{"tenant:t", "project:t/p"} {
		for _, q := range []struct {
			unit  Unit
			limit float64
		}{{UnitRequests, 1e12}, {UnitTokens, benchTPM}} {
			bk, err := NewBucket(BucketConfig{Name: name, Limit: q.limit}, t0)
			if err != nil {
				b.Fatal(err)
			}
			req.Quotas = append(req.Quotas, Quota{Bucket: bk, Unit: q.unit})
		}
	}
	return req
}

func benchLimiters() (rpm, tpm *rate.Limiter) {
	return rate.NewLimiter(rate.Limit(1e12/60), 1e9), rate.NewLimiter(rate.Limit(benchTPM/60), 1e12)
}

// parallel64 runs f from 64 goroutines, each with its own advancing time.
func parallel64(b *testing.B, f func(now time.Time)) {
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := t0
		for pb.Next() {
			now = now.Add(time.Nanosecond)
			f(now)
		}
	})
}

// uncontended runs f from one goroutine with an advancing time.
func uncontended(b *testing.B, f func(now time.Time)) {
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Nanosecond)
		f(now)
	}
}

func BenchmarkAdmission(b *testing.B) {
	for _, mode := range []struct {
		name string
		run  func(*testing.B, func(time.Time))
	}{{"uncontended", uncontended}, {"parallel64", parallel64}} {
		b.Run("xrate.1limiter/"+mode.name, func(b *testing.B) {
			lim, _ := benchLimiters()
			mode.run(b, func(now time.Time) { _ = lim.ReserveN(now, 1) })
		})
		b.Run("xrate.2limiters/"+mode.name, func(b *testing.B) {
			rpm, tpm := benchLimiters()
			mode.run(b, func(now time.Time) {
				_ = rpm.ReserveN(now, 1)
				_ = tpm.ReserveN(now, 200)
			})
		})
		b.Run("lane.ReserveAt/"+mode.name, func(b *testing.B) {
			l := benchLane(b)
			mode.run(b, func(now time.Time) {
				if _, err := l.ReserveAt(now, benchReq); err != nil {
					b.Error(err)
				}
			})
		})
	}
	for _, mode := range []struct {
		name string
		run  func(*testing.B, func(time.Time))
	}{{"uncontended", uncontended}, {"parallel64", parallel64}} {
		b.Run("three-layers.ReserveAt/"+mode.name, func(b *testing.B) {
			l, req := benchLane(b), threeLayers(b)
			mode.run(b, func(now time.Time) {
				if _, err := l.ReserveAt(now, req); err != nil {
					b.Error(err)
				}
			})
		})
	}
	b.Run("three-layers.Admit+Done/parallel64", func(b *testing.B) {
		l, req := benchLane(b), threeLayers(b)
		ctx := b.Context()
		parallel64(b, func(time.Time) {
			p, err := l.Admit(ctx, req)
			if err != nil {
				b.Error(err)
				return
			}
			if err := p.Done(Outcome{PromptTokens: 100, CompletionTokens: 50, Latency: time.Second}); err != nil {
				b.Error(err)
			}
		})
	})
	b.Run("lane.Admit+Done/uncontended", func(b *testing.B) {
		l := benchLane(b)
		ctx := b.Context()
		b.ReportAllocs()
		for b.Loop() {
			p, err := l.Admit(ctx, benchReq)
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Done(Outcome{PromptTokens: 100, CompletionTokens: 50, Latency: time.Second}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
