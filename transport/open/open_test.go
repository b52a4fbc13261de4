package open_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka"
	"github.com/llmq/llmq/transport/kafka/kafkatest"
	"github.com/llmq/llmq/transport/memory"
	"github.com/llmq/llmq/transport/open"
	"github.com/llmq/llmq/transport/rabbitmq"
	"github.com/llmq/llmq/transport/rabbitmq/rabbitmqtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url  string
		want open.Target
	}{
		{"kafka://127.0.0.1:9092/llmq.jobs", open.Target{Kind: open.KindKafka, Dest: "llmq.jobs", Brokers: []string{"127.0.0.1:9092"}}},
		{"kafka://a:1,b:2/jobs?group=g1&prefetch=10", open.Target{Kind: open.KindKafka, Dest: "jobs", Brokers: []string{"a:1", "b:2"}, Group: "g1", Prefetch: 10}},
		{"kafka://a:1", open.Target{Kind: open.KindKafka, Dest: open.DestDefault, Brokers: []string{"a:1"}}},
		{"kafka://a:1/t?key=tenant&max_message_bytes=2097152", open.Target{Kind: open.KindKafka, Dest: "t", Brokers: []string{"a:1"},
			Key: "tenant", MaxMessageBytes: 2 << 20}},
		{"kafka://a:1/t?key=id", open.Target{Kind: open.KindKafka, Dest: "t", Brokers: []string{"a:1"}, Key: "id"}},
		{"kafka://a:1/t?tls=true", open.Target{Kind: open.KindKafka, Dest: "t", Brokers: []string{"a:1"}, TLS: open.TLS{Enabled: true}}},
		{"kafka://a:1/t?tls=1&tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/k.pem&tls_server_name=kafka.internal", open.Target{
			Kind: open.KindKafka, Dest: "t", Brokers: []string{"a:1"},
			TLS: open.TLS{Enabled: true, CAFile: "/ca.pem", CertFile: "/c.pem", KeyFile: "/k.pem", ServerName: "kafka.internal"},
		}},
		{"kafka://a:1/t?tls_ca=/ca.pem", open.Target{Kind: open.KindKafka, Dest: "t", Brokers: []string{"a:1"},
			TLS: open.TLS{Enabled: true, CAFile: "/ca.pem"}}},
		{"kafka://a:1/t?tls_insecure_skip_verify=true", open.Target{Kind: open.KindKafka, Dest: "t", Brokers: []string{"a:1"},
			TLS: open.TLS{Enabled: true, InsecureSkipVerify: true}}},
		{"kafka://a:1/t?tls=false", open.Target{Kind: open.KindKafka, Dest: "t", Brokers: []string{"a:1"}}},
		{"kafka://svc:s3cr3t@a:1/t?sasl=scram-sha-512", open.Target{Kind: open.KindKafka, Dest: "t", Brokers: []string{"a:1"},
			SASL: "SCRAM-SHA-512", SASLUsername: "svc"}},
		{"kafka://a:1/t?sasl=SCRAM-SHA-256&tls=true", open.Target{Kind: open.KindKafka, Dest: "t", Brokers: []string{"a:1"},
			SASL: "SCRAM-SHA-256", TLS: open.TLS{Enabled: true}}},
		{"kafka://u:p@a:1/t?sasl=plain", open.Target{Kind: open.KindKafka, Dest: "t", Brokers: []string{"a:1"}, SASL: "PLAIN", SASLUsername: "u"}},
		{"amqp://guest:guest@127.0.0.1:5672/?queue=llmq.jobs", open.Target{Kind: open.KindRabbitMQ, Dest: "llmq.jobs", AMQPURL: "amqp://guest:guest@127.0.0.1:5672/"}},
		{"amqp://u:p@h:5672/vh?queue=q&queue_type=classic&max_priority=5&heartbeat=5", open.Target{
			Kind: open.KindRabbitMQ, Dest: "q", QueueType: "classic", MaxPriority: 5, AMQPURL: "amqp://u:p@h:5672/vh?heartbeat=5",
		}},
		{"amqp://h/?delivery_limit=2", open.Target{Kind: open.KindRabbitMQ, Dest: open.DestDefault, DeliveryLimit: 2, AMQPURL: "amqp://h/"}},
		{"amqp://h/?delivery_limit=-1", open.Target{Kind: open.KindRabbitMQ, Dest: open.DestDefault, DeliveryLimit: -1, AMQPURL: "amqp://h/"}},
		{"memory://demo", open.Target{Kind: open.KindMemory, Dest: open.DestDefault, Memory: "demo"}},
		{"memory://demo/q2", open.Target{Kind: open.KindMemory, Dest: "q2", Memory: "demo"}},
	}
	for _, tc := range tests {
		got, err := open.Parse(tc.url)
		require.NoError(t, err, tc.url)
		require.Equal(t, tc.want, got, tc.url)
	}
	for bad, why := range map[string]string{
		"redis://x":                                `scheme "redis" (want one of amqp, amqps, kafka, memory)`,
		"kafka:///topic":                           "host:port",
		"kafka://a:1/t?prefetch=0":                 "prefetch",
		"kafka://a:1/t?key=tenant_id":              "key",
		"kafka://a:1/t?max_message_bytes=100":      "max_message_bytes",
		"kafka://a:1/t?max_message_bytes=x":        "max_message_bytes",
		"kafka://a:1/t?tls=yes":                    "tls",
		"kafka://a:1/t?tls=false&tls_ca=/ca.pem":   "tls=false",
		"kafka://a:1/t?tls_cert=/c.pem":            "tls_cert and tls_key",
		"kafka://a:1/t?tls_key=/k.pem":             "tls_cert and tls_key",
		"kafka://a:1/t?tls_insecure_skip_verify=2": "tls_insecure_skip_verify",
		"kafka://a:1/t?sasl=gssapi":                "sasl",
		"kafka://u:p@a:1/t":                        "no sasl= mechanism",
		"kafka://a:1/t?sasl_mechanism=plain":       "unknown kafka parameter",
		"amqp://h/?max_priority=x":                 "max_priority",
		"amqp://h/?delivery_limit=0":               "delivery_limit",
		"amqp://h/?delivery_limit=-2":              "delivery_limit",
		"::":                                       "missing protocol scheme",
	} {
		_, err := open.Parse(bad)
		require.ErrorIs(t, err, open.ErrBadURL, bad)
		require.ErrorContains(t, err, why, bad)
	}
}

// Schemes is what Parse takes: each scheme parses, and another does not.
func TestSchemes(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"amqp", "amqps", "kafka", "memory"}, open.Schemes())
	for _, scheme := range open.Schemes() {
		_, err := open.Parse(scheme + "://h:1/q")
		require.NoError(t, err, scheme)
	}
}

// A broker URL that cannot be used never comes back with its password in
// the error, however it is malformed.
func TestErrorsHidePasswords(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"kafka://svc:s3cr3t@a:notaport/t?sasl=plain",
		"kafka://svc:s3cr3t@a:1/t",
		"kafka://svc:s3cr3t@a:1/t?sasl=gssapi",
		"kafka://svc:s3cr3t@a:1/t?bogus=1",
		"amqp://guest:s3cr3t@h:5672/%zz",
		"amqp://guest:s3cr3t@[::1/",
		"amqp://guest:s3cr3t@ho st:5672/",
		"amqp://guest:s3cr3t@h:5672/\n",
		"amqp://guest:s3cr3t@h:99999/",
		"amqp://guest:s3cr3t@h/?max_priority=x",
		" amqp://guest:s3cr3t@h/",
		"redis://user:s3cr3t@h",
		"guest:s3cr3t@h:5672",
		"amqp://guest:s3cr/et@h:x/",
	} {
		_, err := open.Parse(bad)
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), "s3cr", bad)
		_, _, err = open.Open(context.Background(), bad, open.Options{})
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), "s3cr", bad)
	}
	_, err := open.Parse("amqp://guest:s3cr3t@h:x/")
	require.ErrorContains(t, err, "amqp://xxxxx@h:x/", "the URL is quoted with its userinfo masked")
}

// SASL credentials come from the URL or the environment; without either,
// Open refuses before dialing.
func TestOpenKafkaCredentials(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, err := open.Open(ctx, "kafka://a:1/t?sasl=scram-sha-256", open.Options{Getenv: func(string) string { return "" }})
	require.ErrorContains(t, err, open.EnvKafkaPassword)
	_, _, err = open.Open(ctx, "kafka://svc@a:1/t?sasl=plain", open.Options{Getenv: func(string) string { return "" }})
	require.ErrorContains(t, err, "needs a user and a password")
	env := map[string]string{open.EnvKafkaUsername: "svc", open.EnvKafkaPassword: "pw"}
	pub, sub, err := open.Open(ctx, "kafka://a:1/t?sasl=scram-sha-256", open.Options{Getenv: func(k string) string { return env[k] }})
	require.NoError(t, err)
	require.NoError(t, sub.Close())
	require.NoError(t, pub.Close())
	_, _, err = open.Open(ctx, "kafka://a:1/t?tls_ca=/nonexistent/ca.pem", open.Options{})
	require.ErrorContains(t, err, "tls_ca")
}

func TestOpenKinds(t *testing.T) {
	ctx := context.Background()
	for url, check := range map[string]func(transport.Publisher, transport.Subscriber){
		"kafka://127.0.0.1:1/t": func(p transport.Publisher, s transport.Subscriber) {
			require.IsType(t, &kafka.Publisher{}, p)
			require.IsType(t, &kafka.Subscriber{}, s)
		},
		"amqp://guest:guest@127.0.0.1:5672/?queue=q": func(p transport.Publisher, s transport.Subscriber) {
			require.IsType(t, &rabbitmq.Publisher{}, p)
			require.IsType(t, &rabbitmq.Subscriber{}, s)
		},
		"memory://kinds": func(p transport.Publisher, s transport.Subscriber) {
			require.IsType(t, &memory.Publisher{}, p)
			require.IsType(t, &memory.Subscriber{}, s)
		},
	} {
		pub, sub, err := open.Open(ctx, url, open.Options{})
		require.NoError(t, err, url)
		check(pub, sub)
		require.NoError(t, sub.Close())
		require.NoError(t, pub.Close())
	}
}

// A message published through one Open reaches a subscriber of another.
func TestOpenRoundTrip(t *testing.T) {
	addrs := kafkatest.NewCluster(t, "jobs")
	for _, url := range []string{
		"memory://roundtrip/jobs",
		"kafka://" + addrs[0] + "," + addrs[1] + "/jobs?group=open-test",
		"amqp://guest:guest@127.0.0.1:5672/?queue=llmq-open-test-" + time.Now().Format("150405.000000"),
	} {
		t.Run(url, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			target, err := open.Parse(url)
			require.NoError(t, err)
			pub, _, err := open.Open(ctx, url, open.Options{})
			require.NoError(t, err)
			defer pub.Close()
			_, sub, err := open.Open(ctx, url, open.Options{Prefetch: 1})
			require.NoError(t, err)
			defer sub.Close()
			if target.Kind == open.KindRabbitMQ {
				defer rabbitmqtest.Delete(t, target.Dest, target.Dest+rabbitmq.RejectedSuffix)
			}
			require.NoError(t, pub.Publish(ctx, target.Dest, transport.Message{Value: []byte("hello")}))
			ch, err := sub.Consume(ctx)
			require.NoError(t, err)
			select {
			case m := <-ch:
				require.Equal(t, "hello", string(m.Value))
				require.NoError(t, m.Ack(ctx))
			case <-ctx.Done():
				require.FailNow(t, "no delivery")
			}
		})
	}
}

func TestWithDest(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"kafka://h1:9092,h2:9092/jobs?group=g":       "kafka://h1:9092,h2:9092/replies?group=g",
		"amqp://u:p@h:5672/vh?queue=jobs&prefetch=4": "amqp://u:p@h:5672/vh?prefetch=4&queue=replies",
		"amqp://h:5672":   "amqp://h:5672?queue=replies",
		"memory://b/jobs": "memory://b/replies",
	} {
		got, err := open.WithDest(in, "replies")
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
		tg, err := open.Parse(got)
		require.NoError(t, err)
		require.Equal(t, "replies", tg.Dest)
	}
}
