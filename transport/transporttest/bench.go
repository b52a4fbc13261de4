package transporttest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/llmq/llmq/transport"
)

// BenchBatch is the messages per Publish call in the benchmarks.
const BenchBatch = 1000

// benchPublishers is the number of concurrent publishers.
const benchPublishers = 4

// BenchPayload returns a job-like JSON value of about 340 bytes.
func BenchPayload(i int) []byte {
	id := strconv.Itoa(i)
	v := `{"id":"job-` + id + `","tenant":"bench","priority":"normal","body":{"model":"gpt-4o-mini",` +
		`"messages":[{"role":"user","content":"` + strings.Repeat("x", 200) + `"}],"max_tokens":64}}`
	return []byte(v)
}

// BenchPublish measures Publish throughput with 4 concurrent publishers,
// BenchBatch messages per call, and reports msgs/s. The messages are built
// before the timer starts: each publisher sends its own batch again and
// again.
func BenchPublish(b *testing.B, pub transport.Publisher, dest string) {
	b.Helper()
	batches := benchBatches()
	b.ResetTimer()
	if err := publishN(context.Background(), pub, dest, b.N, batches); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchConsume measures consuming and acking b.N messages through sub and
// reports msgs/s. Publishing them, and joining (Consume until a first,
// extra message is received and acked), happen before the timer starts.
func BenchConsume(b *testing.B, pub transport.Publisher, dest string, sub transport.Subscriber) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := publishN(ctx, pub, dest, b.N+1, benchBatches()); err != nil {
		b.Fatal(err)
	}
	ch, err := sub.Consume(ctx)
	if err != nil {
		b.Fatal(err)
	}
	recvAck(ctx, b, ch)
	b.ResetTimer()
	for range b.N {
		recvAck(ctx, b, ch)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func recvAck(ctx context.Context, b *testing.B, ch <-chan *transport.Message) {
	select {
	case m := <-ch:
		if err := m.Ack(ctx); err != nil {
			b.Fatal(err)
		}
	case <-ctx.Done():
		b.Fatal("timed out")
	}
}

// benchBatches builds one batch of BenchBatch messages per publisher, with
// 64 distinct keys.
func benchBatches() [][]transport.Message {
	out := make([][]transport.Message, benchPublishers)
	for w := range out {
		out[w] = make([]transport.Message, BenchBatch)
		for i := range out[w] {
			n := w*BenchBatch + i
			out[w][i] = transport.Message{Key: []byte(strconv.Itoa(n % 64)), Value: BenchPayload(n)}
		}
	}
	return out
}

// publishN publishes n messages, one publisher per batch: publisher w sends
// messages w*BenchBatch, then w*BenchBatch plus every len(batches)*BenchBatch
// more, each call its batch (cut short for the last).
func publishN(ctx context.Context, pub transport.Publisher, dest string, n int, batches [][]transport.Message) error {
	var g errgroup.Group
	for w, batch := range batches {
		g.Go(func() error {
			for start := w * BenchBatch; start < n; start += len(batches) * BenchBatch {
				if err := pub.Publish(ctx, dest, batch[:min(BenchBatch, n-start)]...); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}
