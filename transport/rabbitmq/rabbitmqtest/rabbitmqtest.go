// Package rabbitmqtest gives tests their own RabbitMQ queues on the test
// broker, so that parallel tests never share one.
package rabbitmqtest

import (
	"cmp"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// URLDefault is the test broker when LLMQ_TEST_AMQP_URL is not set.
const URLDefault = "amqp://guest:guest@127.0.0.1:5672/"

// URL is the test broker: LLMQ_TEST_AMQP_URL, else URLDefault.
func URL() string { return cmp.Or(os.Getenv("LLMQ_TEST_AMQP_URL"), URLDefault) }

// BrokerURL is llmq's broker URL (LLMQ_BROKER form) for queue on the test
// broker.
func BrokerURL(queue string) string { return URL() + "?queue=" + queue }

var seq atomic.Int64

// NewQueue returns a queue name unique to this run and deletes the queue,
// its ".dlq" and their ".rejected" queues when the test ends. Cleanups run
// last-registered first, so the publishers and subscribers a test opens
// afterwards are closed before.
func NewQueue(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("llmq-test-%d-%d", time.Now().UnixNano()%1e9, seq.Add(1))
	t.Cleanup(func() { Delete(t, name, name+".rejected", name+".dlq", name+".dlq.rejected") })
	return name
}

// Delete deletes queues from the test broker, logging (not failing) when the
// broker cannot be reached.
func Delete(t testing.TB, queues ...string) {
	t.Helper()
	conn, err := amqp.Dial(URL())
	if err != nil {
		t.Logf("rabbitmqtest: delete %v: %v", queues, err)
		return
	}
	defer conn.Close()
	for _, q := range queues {
		ch, err := conn.Channel()
		if err != nil {
			t.Logf("rabbitmqtest: delete %s: %v", q, err)
			return
		}
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Logf("rabbitmqtest: delete %s: %v", q, err)
		}
		_ = ch.Close()
	}
}
