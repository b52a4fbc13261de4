package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/store"
)

// TestStreamChunks: appended chunks are announced and read past a
// number; an append again (a retried write) changes nothing; a caller's
// cancel is reported by the next append, which then records nothing and
// deletes the stream's rows; DropStream deletes the chunks.
func TestStreamChunks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	k := store.Key{Tenant: "acme", ID: "j1"}
	heard := make(chan store.Key, 8)
	listening := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		ended <- b.store.Streams().ListenJobChunks(ctx, func() { close(listening) }, func(k store.Key) { heard <- k })
	}()
	<-listening

	left, err := b.store.Streams().AppendChunks(b.ctx, k, 1, [][]byte{[]byte(`{"a":1}`), []byte(`{"a":2}`)})
	require.NoError(t, err)
	require.False(t, left)
	require.Equal(t, k, <-heard)
	left, err = b.store.Streams().AppendChunks(b.ctx, k, 2, [][]byte{[]byte(`{"a":2}`), []byte(`{"a":3}`)})
	require.NoError(t, err)
	require.False(t, left)
	require.Equal(t, k, <-heard)
	cs, err := b.store.Streams().Chunks(b.ctx, k, 1)
	require.NoError(t, err)
	require.Equal(t, []store.Chunk{{Seq: 2, Data: []byte(`{"a":2}`)}, {Seq: 3, Data: []byte(`{"a":3}`)}}, cs)

	// An empty append only asks.
	left, err = b.store.Streams().AppendChunks(b.ctx, k, 4, nil)
	require.NoError(t, err)
	require.False(t, left)

	require.NoError(t, b.store.Streams().CancelStream(b.ctx, k))
	left, err = b.store.Streams().AppendChunks(b.ctx, k, 4, [][]byte{[]byte(`{"a":4}`)})
	require.NoError(t, err)
	require.True(t, left)
	cs, err = b.store.Streams().Chunks(b.ctx, k, 0)
	require.NoError(t, err)
	require.Empty(t, cs, "the cancel deleted the stream")

	other := store.Key{Tenant: "acme", ID: "j2"}
	_, err = b.store.Streams().AppendChunks(b.ctx, other, 1, [][]byte{[]byte(`{}`)})
	require.NoError(t, err)
	require.NoError(t, b.store.Streams().DropStream(b.ctx, other))
	cs, err = b.store.Streams().Chunks(b.ctx, other, 0)
	require.NoError(t, err)
	require.Empty(t, cs)

	cancel()
	require.ErrorIs(t, <-ended, context.Canceled)
}
