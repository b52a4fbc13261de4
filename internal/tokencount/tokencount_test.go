package tokencount

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tiktoken-go/tokenizer"
)

var encodings = []tokenizer.Encoding{tokenizer.O200kBase, tokenizer.Cl100kBase}

// check requires c to count s as the codec does.
func check(t testing.TB, c *Counter, s string) {
	t.Helper()
	want, err := c.codec.Count(s)
	require.NoError(t, err)
	got, err := c.Count(s)
	require.NoError(t, err)
	require.Equal(t, want, got, "%s: %q", c.codec.GetName(), s)
}

// TestCountEqualsTheCodec: every ASCII byte, every pair of them, every
// triple of a sample that covers each class and alternative of the
// patterns, and prompts of the kinds llmq sees, count as the codec counts
// them.
func TestCountEqualsTheCodec(t *testing.T) {
	t.Parallel()
	sample := "aZ0 \t\n\r\v\f'sSrRlLeEdD/.-_\x00\x1f\x7f"
	texts := []string{
		"", "Summarise this sentence in five words. bench-kafka-12345",
		"You are a helpful assistant. Answer in JSON.\n\n", "I'm sure they've done it; we'll see, he'd said. DON'T, IT'S",
		"https://example.com/a/b?c=1&d=2\r\n//comment\n\n\n  \t x", "12345678901 3.14159 0x1F 1,000,000",
		"CamelCaseWordsAND ALLCAPS lower MiXeD", strings.Repeat(" ", 40) + "end", "tabs\t\tand\v\fform feeds\r\n\r\n",
		"{\"a\": [1, 2, {\"b\": null}]}", "''s 's 'S 'll 'LL 're 'Ve 'x",
	}
	for i := range 128 {
		texts = append(texts, string(rune(i)))
		for j := range 128 {
			texts = append(texts, string([]byte{byte(i), byte(j)}))
		}
	}
	for _, a := range []byte(sample) {
		for _, b := range []byte(sample) {
			for _, c := range []byte(sample) {
				texts = append(texts, string([]byte{a, b, c}), " "+string([]byte{a, b, c})+"x")
			}
		}
	}
	for _, enc := range encodings {
		c, err := newCounter(enc)
		require.NoError(t, err)
		for _, s := range texts {
			check(t, c, s)
		}
	}
}

// TestCountEqualsTheCodecOnRandomText draws texts from an alphabet weighted
// towards the bytes the patterns tell apart.
func TestCountEqualsTheCodecOnRandomText(t *testing.T) {
	t.Parallel()
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789    \t\n\r\v\f''''sStTrReEvVmMlLdD//..,,!?-_()[]{}\"\\@#$%^&*+=<>|~`;:\x00\x01\x1b\x7f"
	words := []string{"the", "The", "THE", " of", "'s", "'ll", "don't", "HTTP", "JSON", "x", "12", "1234567", "\n\n", "  ", "\r\n", "://", "..."}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, enc := range encodings {
		c, err := newCounter(enc)
		require.NoError(t, err)
		for range 20000 {
			var b strings.Builder
			for range rng.IntN(40) {
				if rng.IntN(3) == 0 {
					b.WriteString(words[rng.IntN(len(words))])
				} else {
					b.WriteByte(alphabet[rng.IntN(len(alphabet))])
				}
			}
			check(t, c, b.String())
		}
	}
}

// TestCountOfNonASCIITextIsTheCodecs: text with any byte past ASCII is the
// codec's to count, whole.
func TestCountOfNonASCIITextIsTheCodecs(t *testing.T) {
	t.Parallel()
	for _, enc := range encodings {
		c, err := newCounter(enc)
		require.NoError(t, err)
		for _, s := range []string{"café au lait", "naïve résumé", "日本語のテキスト", "emoji 🙂 ok", "ſ 's 'ſ", "a\u00a0b", "x\u0085y", "\xff\xfe"} {
			check(t, c, s)
		}
	}
}

// TestPiecesRememberedAreBounded: past maxPieces distinct pieces the
// remembered ones are dropped, and counts stay right.
func TestPiecesRememberedAreBounded(t *testing.T) {
	t.Parallel()
	c, err := newCounter(tokenizer.O200kBase)
	require.NoError(t, err)
	word := func(i int) string { // a distinct piece per i: letters only
		b := []byte(" w")
		for ; i > 0; i /= 26 {
			b = append(b, byte('a'+i%26))
		}
		return string(b)
	}
	for i := range maxPieces + 100 {
		check(t, c, word(i))
	}
	n := 0
	c.pieces.Range(func(any, any) bool { n++; return true })
	require.LessOrEqual(t, n, maxPieces)
	require.Equal(t, int64(n), c.entries.Load())
	require.Positive(t, n)
	check(t, c, word(1)+word(2))
}

// TestGetSharesOneCounter: the process has one counter per encoding.
func TestGetSharesOneCounter(t *testing.T) {
	t.Parallel()
	a, err := Get(tokenizer.O200kBase)
	require.NoError(t, err)
	b, err := Get(tokenizer.O200kBase)
	require.NoError(t, err)
	require.Same(t, a, b)
	cl, err := Get(tokenizer.Cl100kBase)
	require.NoError(t, err)
	require.NotSame(t, a, cl)
}

// FuzzCount: any text counts as the codec counts it.
func FuzzCount(f *testing.F) {
	for _, s := range []string{"Summarise this sentence.", "I'm  here\n\n\tnow 1234", "a'LL b'Re //x\r\n"} {
		f.Add(s)
	}
	var cs []*Counter
	for _, enc := range encodings {
		c, err := newCounter(enc)
		require.NoError(f, err)
		cs = append(cs, c)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range cs {
			check(t, c, s)
		}
	})
}

func BenchmarkCount(b *testing.B) {
	text := strings.Repeat("Summarise this sentence in five words. ", 5) + "bench-kafka-12345"
	for _, enc := range encodings {
		c, err := newCounter(enc)
		require.NoError(b, err)
		b.Run(string(enc)+"/codec", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = c.codec.Count(text)
			}
		})
		b.Run(string(enc)+"/counter", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = c.Count(text)
			}
		})
	}
}
