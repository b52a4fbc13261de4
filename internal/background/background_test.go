package background_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq/internal/background"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunner(t *testing.T) {
	t.Parallel()
	var r background.Runner
	require.NoError(t, r.Stop(context.Background()), "stop before start does nothing")
	started := make(chan struct{})
	ended := make(chan struct{})
	require.NoError(t, r.Start(context.Background(), func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		close(ended)
	}))
	require.ErrorIs(t, r.Start(context.Background(), func(context.Context) {}), background.ErrStarted)
	<-started
	require.NoError(t, r.Stop(context.Background()))
	select {
	case <-ended:
	default:
		t.Fatal("Stop returned before fn did")
	}
	require.NoError(t, r.Stop(context.Background()), "second stop does nothing")
}

func TestRunnerStopsWithParentAndStopTimesOut(t *testing.T) {
	t.Parallel()
	var r background.Runner
	parent, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	require.NoError(t, r.Start(parent, func(ctx context.Context) {
		<-ctx.Done()
		<-release // a pass that takes its time to finish
	}))
	cancel()
	ctx, cancelStop := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelStop()
	require.ErrorIs(t, r.Stop(ctx), context.DeadlineExceeded)
	close(release)
	require.NoError(t, r.Stop(context.Background()))
}
