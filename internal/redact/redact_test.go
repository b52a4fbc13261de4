package redact_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/redact"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		// Nothing to hide: unchanged, byte for byte.
		"":         "",
		"embedded": "embedded",
		"postgres://postgres@127.0.0.1:5432/llmq?sslmode=disable": "postgres://postgres@127.0.0.1:5432/llmq?sslmode=disable",
		"kafka://127.0.0.1:9092,127.0.0.1:9093/jobs?group=g":      "kafka://127.0.0.1:9092,127.0.0.1:9093/jobs?group=g",
		"memory://bench/llmq.jobs":                                "memory://bench/llmq.jobs",
		"http://127.0.0.1:8081/v1":                                "http://127.0.0.1:8081/v1",
		"http://host/p?mail=a@b":                                  "http://host/p?mail=a@b",
		// The user information's password.
		"postgres://postgres:S3cretPW@127.0.0.1:5999/x":          "postgres://postgres:xxxxx@127.0.0.1:5999/x",
		"amqp://guest:guest@127.0.0.1:5672/?queue=llmq.jobs":     "amqp://guest:xxxxx@127.0.0.1:5672/?queue=llmq.jobs",
		"amqps://u:p%40ss@mq.example:5671/vh?queue=q&prefetch=5": "amqps://u:xxxxx@mq.example:5671/vh?queue=q&prefetch=5",
		"postgres://u:pa@ss@db/x":                                "postgres://u:xxxxx@db/x",
		"postgres://u:S3cret%zz@db/x":                            "postgres://u:xxxxx@db/x",
		"postgres://u:12/34@db/x":                                "postgres://u:xxxxx@db/x",
		"postgres://u:a#b?c@db/x?sslmode=disable":                "postgres://u:xxxxx@db/x?sslmode=disable",
		"postgres://u:@db/x":                                     "postgres://u:xxxxx@db/x",
		// Secret query parameters, the others kept in order.
		"postgres://db/x?sslmode=disable&password=S3cret&user=u": "postgres://db/x?sslmode=disable&password=xxxxx&user=u",
		"https://hooks.example/a?Token=S3cret#frag":              "https://hooks.example/a?Token=xxxxx#frag",
		"https://api.example/v1?api_key=S3cret&api%5Fkey=S3cret": "https://api.example/v1?api_key=xxxxx&api%5Fkey=xxxxx",
		"postgres://u:p@db/x?sslpassword=S3cret":                 "postgres://u:xxxxx@db/x?sslpassword=xxxxx",
		// libpq connection strings and bare user:pass@host.
		"host=db user=u password=S3cret dbname=x":    "host=db user=u password=xxxxx dbname=x",
		"host=db password='S3 cret' sslmode=disable": "host=db password=xxxxx sslmode=disable",
		"u:S3cret@db:5432":                           "u:xxxxx@db:5432",
	} {
		require.Equal(t, want, redact.URL(in), "URL(%q)", in)
		require.NotContains(t, redact.URL(in), "S3cret", in)
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "sk-l…", redact.Key("sk-llmq-local"))
	require.Equal(t, "xxxxx", redact.Key("abcd"), "a short key is hidden whole")
	require.Equal(t, "xxxxx", redact.Key("abcdefghijk"))
	require.Equal(t, "xxxxx", redact.Key(""))
}

func TestEndpoint(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://hooks.slack.com/services/T000/B000/XXXXSECRET": "https://hooks.slack.com/…",
		"https://u:pw@hooks.example:8443/h?token=s":             "https://hooks.example:8443/…",
		"http://alertmanager:9093":                              "http://alertmanager:9093",
		"http://alertmanager:9093/":                             "http://alertmanager:9093",
		"://nope/SECRET":                                        redact.Mask,
		"hooks.slack.com/services/SECRET":                       redact.Mask,
	} {
		require.Equal(t, want, redact.Endpoint(in), in)
	}
}
