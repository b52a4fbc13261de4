package kafka

import (
	"testing"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
)

func TestTrackerCommitsContiguousPrefix(t *testing.T) {
	tr := newTracker("t", 0)
	var ds []*delivery
	for _, off := range []int64{10, 11, 12, 14, 15} { // 13 is a gap (compaction)
		ds = append(ds, tr.add(kafkago.Message{Offset: off}))
	}
	_, ok := tr.toCommit()
	require.False(t, ok)

	tr.ack(ds[1]) // 11 done, 10 not yet
	_, ok = tr.toCommit()
	require.False(t, ok)

	tr.ack(ds[0]) // 10, 11 done
	at, ok := tr.toCommit()
	require.True(t, ok)
	require.Equal(t, int64(12), at)

	tr.committed = at
	tr.ack(ds[4]) // 15 done, 12 and 14 pending
	_, ok = tr.toCommit()
	require.False(t, ok)

	tr.ack(ds[2])
	tr.ack(ds[3]) // all done; the gap at 13 does not hold the prefix back
	at, ok = tr.toCommit()
	require.True(t, ok)
	require.Equal(t, int64(16), at)
}

func TestTrackerCompacts(t *testing.T) {
	tr := newTracker("t", 0)
	for off := range int64(1000) {
		tr.ack(tr.add(kafkago.Message{Offset: off}))
	}
	require.Equal(t, int64(1000), tr.commitAt)
	require.LessOrEqual(t, len(tr.pending)-tr.head, 1)
	require.Less(t, len(tr.pending), 200)
}
