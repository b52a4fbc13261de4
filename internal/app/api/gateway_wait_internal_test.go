package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
	"github.com/llmq/llmq/transport/memory"
)

// deafListener listens but hears nothing: each session calls listening,
// then lasts until the test drops it.
type deafListener struct{ drop chan struct{} }

func (l deafListener) ListenJobsDone(ctx context.Context, listening func(), _ func(store.Key)) error {
	listening()
	select {
	case <-l.drop:
		return errors.New("connection lost")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waiting reads the gauge of waiting callers.
func waiting(t *testing.T, a *API) float64 {
	var m dto.Metric
	require.NoError(t, a.waiting.Write(&m))
	return m.GetGauge().GetValue()
}

// TestWaitDoneLosesNoWakeUp: a job that ended before its caller waits is
// returned without any notification, and one that ended while the
// listening connection was down is returned when it comes back.
func TestWaitDoneLosesNoWakeUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(storetest.NewPool(t))
	b := memory.New()
	p, err := producer.New(producer.Config{Publisher: b.NewPublisher(), Store: st.Outbox(), Destination: "jobs"})
	require.NoError(t, err)
	clk := clockwork.NewFakeClock()
	l := deafListener{drop: make(chan struct{})}
	a, err := New(Config{Producer: p, Store: st.Jobs(), JobsDone: l, Clock: clk})
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	t.Cleanup(func() { require.NoError(t, a.Stop(ctx)) })
	insert := func(id string) store.Key {
		j := &llmq.Job{ID: id, Tenant: "acme", Body: []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`)}
		require.NoError(t, j.Normalize())
		_, err := st.Jobs().Insert(ctx, j)
		require.NoError(t, err)
		return store.Key{Tenant: "acme", ID: id}
	}
	end := func(k store.Key) {
		_, err := st.Queue().StoreResult(ctx, k, store.Result{Response: []byte(`{"id":"` + k.ID + `"}`)})
		require.NoError(t, err)
	}
	wait := func(k store.Key) <-chan *store.JobRecord {
		out := make(chan *store.JobRecord, 1)
		go func() {
			rec, err := a.waitDone(ctx, k)
			require.NoError(t, err)
			out <- rec
		}()
		return out
	}
	got := func(ch <-chan *store.JobRecord) *store.JobRecord {
		select {
		case rec := <-ch:
			return rec
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter was not woken")
			return nil
		}
	}

	// Ended before the wait: the notification went before anyone listened
	// for this job.
	early := insert("early")
	end(early)
	require.Equal(t, llmq.StatusSucceeded, got(wait(early)).Status)

	// Ended while the connection was down: nobody heard it.
	late := insert("late")
	woken := wait(late)
	require.Eventually(t, func() bool { return waiting(t, a) == 1 }, 10*time.Second, time.Millisecond)
	end(late)
	l.drop <- struct{}{}
	require.NoError(t, clk.BlockUntilContext(ctx, 1)) // the reconnection delay
	clk.Advance(listenRetryMin)
	require.Equal(t, llmq.StatusSucceeded, got(woken).Status)
	require.Equal(t, 0.0, waiting(t, a))
}
