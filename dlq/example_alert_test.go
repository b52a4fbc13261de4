package dlq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmq/llmq/dlq"
)

// A worker reports each dead letter to the alerter; a person gets one message
// per burst. Here Stop flushes the burst at once instead of waiting
// GroupWait.
func ExampleAlerter() {
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct{ Text string }
		if err := json.NewDecoder(r.Body).Decode(&msg); err == nil {
			fmt.Println(msg.Text)
		}
	}))
	defer hook.Close()

	alerter, err := dlq.NewAlerter(dlq.AlertConfig{
		WebhookURL: hook.URL, // e.g. a Slack incoming webhook
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := alerter.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	for _, id := range []string{"job-1", "job-2", "job-3"} {
		alerter.Notify(dlq.Event{
			JobID:     id,
			Tenant:    "acme",
			Reason:    dlq.ReasonRetriesExhausted,
			LastError: "429 Too Many Requests",
			Model:     "gpt-4o-mini",
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := alerter.Stop(ctx); err != nil {
		fmt.Println(err)
	}
	// Output: [FIRING] 3 jobs of tenant acme dead-lettered (retries_exhausted)
}
