package worker

import (
	"encoding/json"
	"errors"
)

// assembly builds a streamed call's completion from its chunks: the
// completion a call without streaming returns (object chat.completion,
// each choice's message the concatenation of its deltas, tool calls
// joined by their index, the usage of the last chunk). Logprobs are not
// assembled.
type assembly struct {
	head    streamHead
	seen    bool
	choices []*assembled
	usage   answerUsage
	rawUse  json.RawMessage
}

type streamHead struct {
	ID                string  `json:"id"`
	Created           int64   `json:"created"`
	Model             string  `json:"model"`
	SystemFingerprint *string `json:"system_fingerprint,omitempty"`
	ServiceTier       *string `json:"service_tier,omitempty"`
}

type streamChunk struct {
	streamHead
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role      string          `json:"role"`
			Content   *string         `json:"content"`
			Refusal   *string         `json:"refusal"`
			ToolCalls []toolCallDelta `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
}

type toolCallDelta struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type assembled struct {
	index            int
	role             string
	content, refusal *string
	tools            []*toolCallDelta
	finish           *string
}

// add folds one chunk in; content reports whether it carried output.
func (a *assembly) add(raw []byte) (content bool, err error) {
	var c streamChunk
	if err := json.Unmarshal(raw, &c); err != nil {
		return false, err
	}
	if !a.seen {
		a.head, a.seen = c.streamHead, true
	}
	if len(c.Usage) > 0 && string(c.Usage) != "null" {
		a.rawUse = c.Usage
		if err := json.Unmarshal(c.Usage, &a.usage); err != nil {
			return false, err
		}
	}
	for _, ch := range c.Choices {
		if ch.Index < 0 || ch.Index > 128 {
			return false, errors.New("choice index out of range")
		}
		for len(a.choices) <= ch.Index {
			a.choices = append(a.choices, &assembled{index: len(a.choices)})
		}
		m := a.choices[ch.Index]
		d := ch.Delta
		if d.Role != "" {
			m.role = d.Role
		}
		m.content = appendText(m.content, d.Content)
		m.refusal = appendText(m.refusal, d.Refusal)
		for _, t := range d.ToolCalls {
			if t.Index < 0 || t.Index > 128 {
				return false, errors.New("tool call index out of range")
			}
			for len(m.tools) <= t.Index {
				m.tools = append(m.tools, &toolCallDelta{Index: len(m.tools)})
			}
			mt := m.tools[t.Index]
			mt.ID += t.ID
			if t.Type != "" {
				mt.Type = t.Type
			}
			mt.Function.Name += t.Function.Name
			mt.Function.Arguments += t.Function.Arguments
		}
		if ch.FinishReason != nil {
			m.finish = ch.FinishReason
		}
		content = content || (d.Content != nil && *d.Content != "") || d.Refusal != nil || len(d.ToolCalls) > 0
	}
	return content, nil
}

func appendText(to, d *string) *string {
	if d == nil {
		return to
	}
	s := *d
	if to != nil {
		s = *to + s
	}
	return &s
}

// completion is the assembled chat.completion.
func (a *assembly) completion() ([]byte, error) {
	if !a.seen {
		return nil, errors.New("the stream ended without a chunk")
	}
	type toolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	type message struct {
		Role      string     `json:"role"`
		Content   *string    `json:"content"`
		Refusal   *string    `json:"refusal"`
		ToolCalls []toolCall `json:"tool_calls,omitempty"`
	}
	type choice struct {
		Index        int     `json:"index"`
		Message      message `json:"message"`
		Logprobs     any     `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	}
	out := struct {
		streamHead
		Object  string          `json:"object"`
		Choices []choice        `json:"choices"`
		Usage   json.RawMessage `json:"usage,omitempty"`
	}{streamHead: a.head, Object: "chat.completion", Choices: []choice{}, Usage: a.rawUse}
	for _, m := range a.choices {
		msg := message{Role: "assistant", Content: m.content, Refusal: m.refusal}
		if m.role != "" {
			msg.Role = m.role
		}
		for _, t := range m.tools {
			msg.ToolCalls = append(msg.ToolCalls, toolCall{ID: t.ID, Type: t.Type, Function: t.Function})
		}
		out.Choices = append(out.Choices, choice{Index: m.index, Message: msg, FinishReason: m.finish})
	}
	return json.Marshal(out)
}
