package worker_test

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/transport"
	memtransport "github.com/llmq/llmq/transport/memory"
	"github.com/llmq/llmq/worker"
)

// counting is a Subscriber that counts the deliveries of each message (by
// key and body) and signals its ack.
type counting struct {
	transport.Subscriber
	mu    sync.Mutex
	count map[[sha256.Size]byte]int
	acked map[[sha256.Size]byte]chan struct{}
}

func fingerprint(key, value []byte) [sha256.Size]byte {
	return sha256.Sum256(append(append([]byte(nil), value...), append([]byte{0}, key...)...))
}

// expect returns the channel closed when the next message of key and value
// is acked, and forgets its earlier deliveries.
func (c *counting) expect(key, value []byte) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := fingerprint(key, value)
	c.count[f] = 0
	ch := make(chan struct{})
	c.acked[f] = ch
	return ch
}

func (c *counting) deliveries(key, value []byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count[fingerprint(key, value)]
}

func (c *counting) Consume(ctx context.Context) (<-chan *transport.Message, error) {
	in, err := c.Subscriber.Consume(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan *transport.Message)
	go func() {
		defer close(out)
		for m := range in {
			f := fingerprint(m.Key, m.Value)
			c.mu.Lock()
			c.count[f]++
			c.mu.Unlock()
			orig := m
			out <- transport.NewMessage(*m, func(ctx context.Context) error {
				err := orig.Ack(ctx)
				c.mu.Lock()
				if ch, ok := c.acked[f]; ok {
					close(ch)
					delete(c.acked, f)
				}
				c.mu.Unlock()
				return err
			}, orig.Nack)
		}
	}()
	return out, nil
}

// FuzzIngest publishes any bytes, key and header through the memory broker
// to a worker on a real Postgres with the real dead-letter writer: every
// message is acked, after at most 3 deliveries, as a recorded job or a dead
// letter holding its raw bytes.
func FuzzIngest(f *testing.F) {
	body := `"body":{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":"x"}]}`
	for _, s := range []string{
		`{"id":"f1",` + body + `}`,
		`{"id":"f2","tenant":"a\u0000b",` + body + `}`,
		`{"id":"f3","tenant":"a` + "\x00\xff" + `b",` + body + `}`,
		`{"id":"f4\u0000",` + body + `}`,
		`{"id":"f5","metadata":{"k":"\u0000"},` + body + `}`,
		`{"id":"f6","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"a\u0000"}]}}`,
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		"\xff\xfe\x00",
	} {
		f.Add([]byte(s), []byte("k"), "trace", "v")
	}
	f.Add([]byte(`{"id":"f7",`+body+`}`), []byte("k\x00\xff"), "h\x00", "v\xff")

	tb := setup(f, upstreamsim.Config{Seed: 9})
	broker := memtransport.New()
	inner, err := broker.NewSubscriber("jobs", memtransport.Config{Prefetch: 8})
	if err != nil {
		f.Fatal(err)
	}
	sub := &counting{Subscriber: inner, count: map[[sha256.Size]byte]int{}, acked: map[[sha256.Size]byte]chan struct{}{}}
	pub := broker.NewPublisher()
	letters, err := dlq.NewWriter(dlq.Config{Store: tb.store.DeadLetters(), Publisher: pub, Destination: "jobs"})
	if err != nil {
		f.Fatal(err)
	}
	w, err := worker.New(worker.Config{
		Subscriber: sub, Store: tb.store.Queue(), DeadLetters: letters,
		Upstream: upstreamAt(tb.sim.URL, 10*time.Second), Strategy: shaping.StrategyRetry,
		Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		f.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})

	f.Fuzz(func(t *testing.T, value, key []byte, hk, hv string) {
		ctx := context.Background()
		acked := sub.expect(key, value)
		var jobsBefore int
		if err := tb.store.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&jobsBefore); err != nil {
			t.Fatal(err)
		}
		msg := transport.Message{Key: key, Value: value, Headers: map[string]string{hk: hv}}
		if err := pub.Publish(ctx, "jobs", msg); err != nil {
			t.Fatal(err)
		}
		select {
		case <-acked:
		case <-time.After(30 * time.Second):
			t.Fatalf("message %q not acked after 30s (%d deliveries)", value, sub.deliveries(key, value))
		}
		if n := sub.deliveries(key, value); n > 3 {
			t.Fatalf("message %q delivered %d times", value, n)
		}
		var letter bool
		if err := tb.store.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM dead_letters WHERE message = $1)`, value).Scan(&letter); err != nil {
			t.Fatal(err)
		}
		if letter {
			return
		}
		j, err := llmq.Decode(value, llmq.DecodeOptions{})
		if err != nil {
			t.Fatalf("message %q is neither a dead letter nor a job: %v", value, err)
		}
		var jobs int
		if err := tb.store.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&jobs); err != nil {
			t.Fatal(err)
		}
		if _, err := tb.store.Jobs().Get(ctx, j.Tenant, j.ID); err != nil && jobs == jobsBefore {
			t.Fatalf("message %q is neither a dead letter nor a job", value)
		}
	})
}
