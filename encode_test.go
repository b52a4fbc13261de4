package llmq_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
)

// markupJob is a job whose body carries about n bytes of <, > and &.
func markupJob(t testing.TB, n int) *llmq.Job {
	t.Helper()
	content := `"` + strings.Repeat("<a href='x'>&amp;</a>", n/21) + `"`
	j := &llmq.Job{ID: "markup", Tenant: "acme", Priority: llmq.PriorityNormal,
		Metadata: map[string]string{"note": "<b>&</b>"},
		Body:     json.RawMessage(`{"model":"m","messages":[{"role":"user","content":` + content + `}]}`)}
	require.NoError(t, j.Validate())
	return j
}

// A 600 KB body full of markup encodes to about 600 KB (json.Marshal made
// it 2.85 MB, over the 1 MiB limit), byte for byte, and comes back the same.
func TestEncodeKeepsMarkup(t *testing.T) {
	t.Parallel()
	j := markupJob(t, 600<<10)
	enc, err := j.Encode()
	require.NoError(t, err)
	require.Less(t, len(enc), len(j.Body)+200, "encoded %d bytes for a %d byte body", len(enc), len(j.Body))
	require.NoError(t, llmq.CheckSize(enc, 0))
	require.Contains(t, string(enc), `"content":"<a href='x'>&amp;</a>`)
	require.Contains(t, string(enc), `"note":"<b>&</b>"`)
	require.NotEqual(t, byte('\n'), enc[len(enc)-1], "no trailing newline")
	back, err := llmq.Decode(enc, llmq.DecodeOptions{})
	require.NoError(t, err)
	requireSameJob(t, j, back)
	require.Equal(t, string(j.Body), string(back.Body), "the body is kept byte for byte")
}

func TestCheckSize(t *testing.T) {
	t.Parallel()
	require.NoError(t, llmq.CheckSize(make([]byte, 10), 10))
	err := llmq.CheckSize(make([]byte, 11), 10)
	var tl *llmq.TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Equal(t, llmq.TooLargeError{Size: 11, Limit: 10}, *tl)
	require.True(t, errors.Is(err, llmq.ErrTooLarge))
	require.EqualError(t, err, "llmq: message is 11 bytes, over the 10 byte limit")
	require.NoError(t, llmq.CheckSize(make([]byte, llmq.MaxMessageBytesDefault), 0), "0 is the default limit")
	require.ErrorIs(t, llmq.CheckSize(make([]byte, llmq.MaxMessageBytesDefault+1), 0), llmq.ErrTooLarge)
	require.NoError(t, llmq.CheckSize(make([]byte, 1<<22), -1), "-1 is no limit")
}

func BenchmarkEncode(b *testing.B) {
	j := markupJob(b, 4<<10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := j.Encode(); err != nil {
			b.Fatal(err)
		}
	}
}
