package transporttest

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmq/llmq/transport"
)

// BenchBatch is the messages per Publish call in the benchmarks.
const BenchBatch = 1000

// BenchPayload returns a job-like JSON value of about 340 bytes.
func BenchPayload(i int) []byte {
	id := strconv.Itoa(i)
	v := `{"id":"job-` + id + `","tenant":"bench","priority":"normal","body":{"model":"gpt-4o-mini",` +
		`"messages":[{"role":"user","content":"` + strings.Repeat("x", 200) + `"}],"max_tokens":64}}`
	return []byte(v)
}

// BenchPublish measures Publish throughput with 4 concurrent publishers,
// BenchBatch messages per call, and reports msgs/s.
func BenchPublish(b *testing.B, pub transport.Publisher, dest string) {
	b.Helper()
	ctx := context.Background()
	const workers = 4
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for start := w * BenchBatch; start < b.N; start += workers * BenchBatch {
				n := min(BenchBatch, b.N-start)
				msgs := make([]transport.Message, n)
				for i := range msgs {
					msgs[i] = transport.Message{Key: []byte(strconv.Itoa((start + i) % 64)), Value: BenchPayload(start + i)}
				}
				if err := pub.Publish(ctx, dest, msgs...); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchConsume publishes b.N messages untimed, then measures consuming and
// acking all of them through sub, and reports msgs/s.
func BenchConsume(b *testing.B, pub transport.Publisher, dest string, sub transport.Subscriber) {
	b.Helper()
	b.StopTimer()
	BenchPublish(b, pub, dest)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.ResetTimer()
	b.StartTimer()
	ch, err := sub.Consume(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		select {
		case m := <-ch:
			if err := m.Ack(ctx); err != nil {
				b.Fatal(err)
			}
		case <-ctx.Done():
			b.Fatal("timed out")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
