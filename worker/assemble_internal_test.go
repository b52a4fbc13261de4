package worker

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAssembly: the chunks of a stream make the completion a call without
// streaming returns: content concatenated, tool calls joined by index,
// the finish reason and the usage of the last chunk.
func TestAssembly(t *testing.T) {
	chunks := []string{
		`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":null}`,
		`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"Hel"}}],"usage":null}`,
		`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"lo"}}],"usage":null}`,
		`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":1,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"t1","type":"function","function":{"name":"f","arguments":"{\"a\""}}]}}],"usage":null}`,
		`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}}],"usage":null}`,
		`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"},{"index":1,"delta":{},"finish_reason":"tool_calls"}],"usage":null}`,
		`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}}`,
	}
	var a assembly
	var content []bool
	for _, c := range chunks {
		got, err := a.add([]byte(c))
		require.NoError(t, err)
		content = append(content, got)
	}
	require.Equal(t, []bool{false, true, true, true, true, false, false}, content)
	require.Equal(t, answerUsage{PromptTokens: 5, CompletionTokens: 9}, a.usage)
	b, err := a.completion()
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"c1","object":"chat.completion","created":7,"model":"m",
		"choices":[
			{"index":0,"message":{"role":"assistant","content":"Hello","refusal":null},"logprobs":null,"finish_reason":"stop"},
			{"index":1,"message":{"role":"assistant","content":null,"refusal":null,
				"tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
				"logprobs":null,"finish_reason":"tool_calls"}],
		"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}}`, string(b))

	_, err = (&assembly{}).completion()
	require.Error(t, err, "a stream without a chunk has no completion")
}
