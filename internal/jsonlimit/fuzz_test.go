package jsonlimit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"unicode/utf8"

	"github.com/llmq/llmq/internal/jsonlimit"
)

// shape is what encoding/json sees of a valid JSON text: its depth, and
// the longest key and string value in runes and in decoded bytes.
type shape struct {
	depth                                  int
	keyRunes, keyBytes, strRunes, strBytes int
}

func measure(data []byte) (shape, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var (
		s     shape
		depth int
		// inObject[i] and expectKey[i] describe the container at depth i+1.
		inObject, expectKey []bool
	)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return s, true
		}
		if err != nil {
			return s, false
		}
		isKey := depth > 0 && inObject[depth-1] && expectKey[depth-1]
		if depth > 0 && inObject[depth-1] {
			expectKey[depth-1] = !expectKey[depth-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				depth++
				s.depth = max(s.depth, depth)
				inObject, expectKey = append(inObject[:depth-1], v == '{'), append(expectKey[:depth-1], true)
			default:
				depth--
				if depth > 0 && inObject[depth-1] {
					expectKey[depth-1] = true // the container was a member's value
				}
			}
		case string:
			if isKey {
				s.keyRunes, s.keyBytes = max(s.keyRunes, utf8.RuneCountInString(v)), max(s.keyBytes, len(v))
			} else {
				s.strRunes, s.strBytes = max(s.strRunes, utf8.RuneCountInString(v)), max(s.strBytes, len(v))
			}
		}
	}
}

// FuzzCheck holds the scanner to encoding/json on valid JSON: a text passes
// limits at its own depth and decoded lengths and fails, naming the limit,
// one level or one rune below them (a length counts at least a rune and
// at most a byte of the decoded string); it never panics on any input.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":"b"}`, `[{"k":[1,{"x":"y"}]},"s"]`, `{"a":{"b":{}},"c":["d",{"e":"\u00e9\ud83d\ude00"}]}`,
		`"top"`, `{"\\\"k":"\n"}`, `[[],[[]],{}]`, "{\"\xff\":\"\xc3\xa9\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = jsonlimit.Check(data, jsonlimit.Limits{MaxKeyBytes: 3, MaxStringBytes: 3, MaxDepth: 3})
		s, ok := measure(data)
		if !ok || !json.Valid(data) {
			return
		}
		within := jsonlimit.Limits{MaxKeyBytes: max(s.keyBytes, 1), MaxStringBytes: max(s.strBytes, 1), MaxDepth: max(s.depth, 1)}
		if err := jsonlimit.Check(data, within); err != nil {
			t.Fatalf("%q within %+v: %v", data, s, err)
		}
		for _, tc := range []struct {
			what  jsonlimit.What
			limit int
			l     jsonlimit.Limits
		}{
			{jsonlimit.Depth, s.depth, jsonlimit.Limits{MaxDepth: s.depth - 1}},
			{jsonlimit.Key, s.keyRunes, jsonlimit.Limits{MaxKeyBytes: s.keyRunes - 1}},
			{jsonlimit.Str, s.strRunes, jsonlimit.Limits{MaxStringBytes: s.strRunes - 1}},
		} {
			if tc.limit < 2 {
				continue // a limit of 0 is none
			}
			var e *jsonlimit.Error
			if err := jsonlimit.Check(data, tc.l); !errors.As(err, &e) || e.What != tc.what {
				t.Fatalf("%q under %+v (%+v): %v", data, tc.l, s, err)
			}
		}
	})
}
