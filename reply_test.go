package llmq_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
)

// TestDecodeReplyTo: a job's reply_to is decoded and checked field by
// field: a destination is required, a webhook must be https without
// credentials, and it survives Validated.
func TestDecodeReplyTo(t *testing.T) {
	t.Parallel()
	const body = `,"body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`
	j, err := llmq.Decode([]byte(`{"id":"a","reply_to":{"to":"replies","correlation_id":"c1","webhook":"https://h.example/x"}`+body), llmq.DecodeOptions{})
	require.NoError(t, err)
	require.Equal(t, &llmq.Reply{To: "replies", CorrelationID: "c1", Webhook: "https://h.example/x"}, j.ReplyTo)
	require.True(t, j.Validated())
	j.ReplyTo.To = "other"
	require.False(t, j.Validated(), "a changed reply is no longer the decoded one")

	for in, field := range map[string]string{
		`{"correlation_id":"c1"}`:                 "reply_to.to",
		`{"webhook":"http://h.example/x"}`:        "reply_to.webhook",
		`{"webhook":"https://u:p@h.example/x"}`:   "reply_to.webhook",
		`{"to":"q","webhook":"not a url at all"}`: "reply_to.webhook",
		`"replies"`: "reply_to",
	} {
		_, err := llmq.Decode([]byte(`{"id":"a","reply_to":`+in+body), llmq.DecodeOptions{})
		var ve *llmq.ValidationError
		require.True(t, errors.As(err, &ve), in)
		require.Equal(t, []string{field}, ve.Fields(), in)
	}
}
