package jsonlimit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/jsonlimit"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	l := jsonlimit.Limits{MaxKeyBytes: 4, MaxStringBytes: 6, MaxDepth: 3}
	for _, tc := range []struct {
		name, json string
		what       jsonlimit.What
		offset     int64
	}{
		{"within", `{"abcd":"abcdef","k":[[1]],"l":{"m":"x"}}`, "", 0},
		{"key", `{"abcde":0}`, jsonlimit.Key, 6},
		{"key after a comma", `{"a":1,"abcde":0}`, jsonlimit.Key, 12},
		{"key in an array's object", `[{"a":"b"},{"abcde":0}]`, jsonlimit.Key, 17},
		{"a string value is not a key", `{"a":"abcdef"}`, "", 0},
		{"string", `{"a":"abcdefg"}`, jsonlimit.Str, 12},
		{"string in an array", `["abcdefg"]`, jsonlimit.Str, 8},
		{"escapes count what they decode to", `{"a":"\u00e9\n\"\\\u2028x"}`, jsonlimit.Str, 23},
		{"an escaped surrogate pair is 4 bytes", `["\ud83d\ude00ab"]`, "", 0},
		{"a lone surrogate is U+FFFD", `["\ud83dabcd"]`, jsonlimit.Str, 11},
		{"invalid UTF-8 is U+FFFD", "[\"a\xffbcd\"]", jsonlimit.Str, 6},
		{"a cut sequence is U+FFFD a byte", "[\"\xe3\x81\"]", "", 0},
		{"a cut sequence past the limit", "[\"abc\xe3\x81\"]", jsonlimit.Str, 7},
		{"an escaped quote does not end the string", `["abcde\"fg"]`, jsonlimit.Str, 9},
		{"braces in strings do not nest", `["[[[[{{{{"]`, jsonlimit.Str, 8},
		{"depth", `[[[[]]]]`, jsonlimit.Depth, 3},
		{"depth of objects", `{"a":{"b":{"c":{}}}}`, jsonlimit.Depth, 15},
		{"depth after closing", `[[[]],[[]],[[[]]]]`, jsonlimit.Depth, 13},
	} {
		err := jsonlimit.Check([]byte(tc.json), l)
		if tc.what == "" {
			require.NoError(t, err, tc.name)
			continue
		}
		var e *jsonlimit.Error
		require.ErrorAs(t, err, &e, tc.name)
		require.Equal(t, tc.what, e.What, tc.name)
		require.Equal(t, tc.offset, e.Offset, tc.name)
	}
	require.NoError(t, jsonlimit.Check([]byte(`{"`+strings.Repeat("a", 1<<20)+`":[`+strings.Repeat("[", 1000)+`]}`), jsonlimit.Limits{}),
		"the zero Limits allow everything")
	require.EqualError(t, jsonlimit.Check([]byte(`{"abcde":1}`), l), "a JSON object key is over the 4 byte limit (at byte 6)")
}

// TestReaderStopsEarly: a decoder reading a 16 MiB key through the reader
// gets the limit's error having read little more than the limit.
func TestReaderStopsEarly(t *testing.T) {
	t.Parallel()
	body := `{"` + strings.Repeat("a", 16<<20) + `":0}`
	src := strings.NewReader(body)
	dec := json.NewDecoder(jsonlimit.NewReader(src, jsonlimit.Limits{MaxKeyBytes: 1024}))
	_, err := dec.Token()
	require.NoError(t, err)
	_, err = dec.Token()
	var e *jsonlimit.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, jsonlimit.Key, e.What)
	read := int64(len(body)) - int64(src.Len())
	require.Less(t, read, int64(64<<10), "read %d bytes of the body", read)
	_, err = dec.Token()
	require.True(t, errors.As(err, &e), "the error stays: %v", err)
}

// TestReaderPassesValid: what is within the limits reads unchanged, in
// pieces of any size.
func TestReaderPassesValid(t *testing.T) {
	t.Parallel()
	in := []byte(`{"jobs":[{"body":{"model":"m","messages":[{"role":"user","content":"h\u00e9llo \"x\""}]}}]}`)
	out, err := io.ReadAll(io.LimitReader(jsonlimit.NewReader(&oneByte{bytes.NewReader(in)}, jsonlimit.Limits{MaxKeyBytes: 8, MaxStringBytes: 32, MaxDepth: 6}), 1<<20))
	require.NoError(t, err)
	require.Equal(t, in, out)
}

// oneByte reads one byte at a time.
type oneByte struct{ r io.Reader }

func (o *oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 1)]) }
