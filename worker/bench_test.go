package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/upstreamsim"
	"github.com/llmq/llmq/shaping"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
	"github.com/llmq/llmq/worker"
)

// benchInFlight is the worker's MaxInFlight and the subscriber's prefetch.
const benchInFlight = 512

// BenchmarkPipeline measures jobs/s end to end: broker → worker (ingest,
// ack) → Postgres → claim → simulator (instant, no quota) → result in
// Postgres. b.N jobs are published and the worker started (subscription
// made, first message fetched) before the timer starts; it stops when the
// last result is stored. Besides jobs/s and the CPU per job (benchCPU) it
// reports the row updates of jobs per job, how many of them were HOT
// (storetest.Updates), the HOT updates of job_attempts per job (the
// answers), and the table's heap (without indexes) per job.
func BenchmarkPipeline(b *testing.B) { benchPipeline(b, notifyNone) }

// BenchmarkPipelineNotified is BenchmarkPipeline with a route on every
// job (the deployment's results topic, or a reply queue on RabbitMQ) and
// a notifier publishing their result events while the jobs run: the cost
// of notifications (docs/design/notifications.md). It ends when the last
// event is delivered too.
func BenchmarkPipelineNotified(b *testing.B) { benchPipeline(b, notifyDeliver) }

// BenchmarkPipelineOutbox is BenchmarkPipelineNotified without the
// notifier: what the outbox rows cost the statements that end the jobs.
func BenchmarkPipelineOutbox(b *testing.B) { benchPipeline(b, notifyWrite) }

// What a benchmark of the pipeline does with notifications.
const (
	notifyNone    = iota // no job has a route
	notifyWrite          // every job has one; nobody delivers
	notifyDeliver        // every job has one; a notifier delivers
)

func benchPipeline(b *testing.B, notify int) {
	brokers := map[string]func(b *testing.B) string{
		"rabbitmq": func(b *testing.B) string {
			return rabbitmqtest.BrokerURL(rabbitmqtest.NewQueue(b))
		},
		"memory": func(b *testing.B) string { return "memory://bench-" + uuid.NewString()[:8] + "/jobs" },
		"kafka": func(b *testing.B) string {
			addrs := kafkatest.NewCluster(b)
			return "kafka://" + strings.Join(addrs, ",") + "/" + kafkatest.NewTopic(b, addrs, 8)
		},
	}
	for _, name := range []string{"memory", "kafka", "rabbitmq"} {
		b.Run(name, func(b *testing.B) {
			tb := setup(b, upstreamsim.Config{Seed: 10, Default: upstreamsim.ModelConfig{Limits: upstreamsim.Limits{RPM: -1, TPM: -1}}})
			url := brokers[name](b)
			target, err := open.Parse(url)
			require.NoError(b, err)
			pub, sub, err := open.Open(context.Background(), url, open.Options{Prefetch: benchInFlight, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(b, err)
			defer pub.Close()
			msgs := make([]transport.Message, b.N)
			for i := range msgs {
				msgs[i] = transport.Message{Value: benchJob(fmt.Sprintf("bench-%s-%d", name, i))}
			}
			require.NoError(b, pub.Publish(context.Background(), target.Dest, msgs...))
			gate := newGate(sub, b.N)
			wcfg := worker.Config{
				Subscriber: gate, Store: tb.store.Queue(), DeadLetters: tb.letters, LaneRates: tb.store.LaneRates(),
				Upstream:    upstreamAt(tb.sim.URL, 30*time.Second),
				Strategy:    shaping.StrategyRetry,
				MaxInFlight: benchInFlight,
				Logger:      slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
			}
			if notify != notifyNone {
				wcfg.ResultsTopic = target.Dest + "-results"
				if name == "memory" {
					// A memory reply needs its queue: publishing nothing makes it.
					require.NoError(b, pub.Publish(context.Background(), wcfg.ResultsTopic))
				}
				if name == "rabbitmq" {
					wcfg.ResultsTopic = rabbitmqtest.NewQueue(b)
					conn, err := amqp.Dial(rabbitmqtest.URL())
					require.NoError(b, err)
					ch, err := conn.Channel()
					require.NoError(b, err)
					_, err = ch.QueueDeclare(wcfg.ResultsTopic, true, false, false, false, nil)
					require.NoError(b, err)
					// Read as the producer awaiting them would: a durable
					// queue that only grows moves its messages to disk, and
					// the server's CPU per reply nearly triples
					// (docs/design/notifications.md, Cost).
					ds, err := ch.Consume(wcfg.ResultsTopic, "", true, false, false, false, nil)
					require.NoError(b, err)
					go func() {
						for range ds {
						}
					}()
					defer conn.Close()
				}
			}
			var outbox *countingOutbox
			if notify == notifyDeliver {
				outbox = &countingOutbox{NotificationOutbox: tb.store.Notifications(), n: int64(b.N), done: make(chan struct{})}
				nt, err := worker.NewNotifier(worker.NotifierConfig{Outbox: outbox, Replier: pub.(transport.Replier),
					Log: slog.New(slog.DiscardHandler)})
				require.NoError(b, err)
				require.NoError(b, nt.Start(context.Background()))
				defer func() { require.NoError(b, nt.Stop(context.Background())) }()
				wcfg.Routed = nt.Wake
			}
			w, err := worker.New(wcfg)
			require.NoError(b, err)
			require.NoError(b, w.Start(context.Background()))
			finished := listenDone(b, tb.store, b.N)
			<-gate.ready
			cpu0 := benchCPU(b, tb.store)
			b.ResetTimer()
			close(gate.open)
			<-gate.done
			select {
			case <-finished:
			case <-time.After(5 * time.Minute):
				b.Fatal("the results were not all stored in 5 minutes")
			}
			stored := time.Now()
			if outbox != nil {
				select {
				case <-outbox.done:
				case <-time.After(5 * time.Minute):
					b.Fatal("the result events were not all delivered in 5 minutes")
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			if outbox != nil {
				// How long the last events took after the last result: the
				// notifier falling behind the pipeline, or its last wait.
				b.ReportMetric(float64(time.Since(stored).Milliseconds()), "tail-ms")
			}
			cpu1 := benchCPU(b, tb.store)
			b.ReportMetric(float64((cpu1.proc-cpu0.proc).Microseconds())/float64(b.N), "proc-µs/job")
			b.ReportMetric(float64((cpu1.pg-cpu0.pg).Microseconds())/float64(b.N), "pg-µs/job")
			var done int
			require.NoError(b, tb.store.Pool().QueryRow(context.Background(),
				`SELECT count(*) FROM jobs WHERE status = 'succeeded'`).Scan(&done))
			require.Equal(b, b.N, done)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(b, w.Stop(ctx))
			upd, hot := storetest.Updates(b, tb.store.Pool(), "jobs")
			b.ReportMetric(float64(upd)/float64(b.N), "upd/job")
			b.ReportMetric(float64(hot)/float64(b.N), "hot/job")
			_, hot = storetest.Updates(b, tb.store.Pool(), "job_attempts")
			b.ReportMetric(float64(hot)/float64(b.N), "att-hot/job")
			var heap int64
			require.NoError(b, tb.store.Pool().QueryRow(context.Background(),
				`SELECT pg_relation_size('jobs')`).Scan(&heap))
			b.ReportMetric(float64(heap)/float64(b.N), "heap-B/job")
		})
	}
}

// countingOutbox closes done once n notifications were delivered (and
// settled): the end of a benchmark whose notifier delivers, so the
// delivery is measured whole.
type countingOutbox struct {
	worker.NotificationOutbox
	n, delivered int64
	done         chan struct{}
}

func (o *countingOutbox) Settle(ctx context.Context, claimed []*store.Notification, failed map[string]store.Failure) error {
	err := o.NotificationOutbox.Settle(ctx, claimed, failed)
	if delivered := int64(len(claimed) - len(failed)); err == nil && delivered > 0 && atomic.AddInt64(&o.delivered, delivered) == o.n {
		close(o.done)
	}
	return err
}

// benchJob is a job of about 200 bytes of prompt, the size the
// throughput figures are stated for.
func benchJob(id string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"body":{"model":"gpt-4o-mini","max_tokens":32,"messages":[{"role":"user","content":"%s %s"}]}}`,
		id, strings.Repeat("Summarise this sentence in five words. ", 5), id))
}

// cpuTimes are CPU times consumed so far: proc by this process (worker,
// simulator, and kfake's broker), pg by the Postgres backends connected to
// the benchmark's database. Per job they tell the cost apart from the
// machine's load, which the other processes of a shared machine make
// noisy in jobs/s.
type cpuTimes struct{ proc, pg time.Duration }

// benchCPU reads the CPU times (Linux: getrusage, and the backends of
// the database: storetest.BackendCPU).
func benchCPU(b *testing.B, st *store.Store) cpuTimes {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return cpuTimes{proc: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), pg: storetest.BackendCPU(b, st.Pool())}
}

// listenDone returns a channel closed once n distinct jobs have been
// announced finished on store.JobDoneChannel: the benchmark's end, without
// polling a count that would cost Postgres more than the jobs.
func listenDone(b *testing.B, st *store.Store, n int) <-chan struct{} {
	ctx, cancel := context.WithCancel(context.Background())
	listening, finished := make(chan struct{}), make(chan struct{})
	seen := make(map[store.Key]bool, n)
	go func() {
		_ = st.Jobs().ListenJobsDone(ctx, func() { close(listening) }, func(k store.Key) {
			if !seen[k] {
				seen[k] = true
				if len(seen) == n {
					close(finished)
				}
			}
		})
	}()
	b.Cleanup(cancel)
	<-listening
	return finished
}

// gate stands between a subscriber and the worker: it holds the messages
// until open is closed (ready says the first one has arrived, so the
// subscription is made) and closes done at the n-th successful ack (every
// job recorded), so the benchmark's timer runs from the first message the
// worker sees.
type gate struct {
	transport.Subscriber
	ready, open, done chan struct{}
	left              atomic.Int64
}

func newGate(sub transport.Subscriber, n int) *gate {
	g := &gate{Subscriber: sub, ready: make(chan struct{}), open: make(chan struct{}), done: make(chan struct{})}
	g.left.Store(int64(n))
	return g
}

func (g *gate) Consume(ctx context.Context) (<-chan *transport.Message, error) {
	in, err := g.Subscriber.Consume(ctx)
	if err != nil {
		return nil, err
	}
	// Buffered, so the forwarder hands over in bulk when it gets the CPU
	// instead of once per message.
	out := make(chan *transport.Message, benchInFlight)
	go func() {
		defer close(out)
		first := true
		for m := range in {
			if first {
				first = false
				close(g.ready)
				<-g.open
			}
			out <- transport.NewMessage(*m, g.ack(m), m.Nack)
		}
	}()
	return out, nil
}

func (g *gate) ack(m *transport.Message) func(context.Context) error {
	return func(ctx context.Context) error {
		err := m.Ack(ctx)
		if err == nil && g.left.Add(-1) == 0 {
			close(g.done)
		}
		return err
	}
}
