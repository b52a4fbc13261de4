package upstreamsim

import (
	"fmt"
	"strings"
	"sync"

	"github.com/tiktoken-go/tokenizer"

	"github.com/llmq/llmq/internal/tokencount"
)

// The counters are the process's (tokencount.Get): each counts exactly as
// its encoding's codec, which is built once.
var (
	codecOnce sync.Once
	codecs    map[string]*tokencount.Counter
	codecErr  error
	wordsOnce sync.Once
	words     []string
)

func loadCodecs() (map[string]*tokencount.Counter, error) {
	codecOnce.Do(func() {
		codecs = make(map[string]*tokencount.Counter, 2)
		for _, enc := range []tokenizer.Encoding{tokenizer.O200kBase, tokenizer.Cl100kBase} {
			c, err := tokencount.Get(enc)
			if err != nil {
				codecErr = fmt.Errorf("upstreamsim: load tokenizer %s: %w", enc, err)
				return
			}
			codecs[string(enc)] = c
		}
	})
	return codecs, codecErr
}

// candidateWords are checked at start-up; those that are exactly one token
// with and without a leading space in every encoding make up completions.
const candidateWords = `the of and to in is was for on that with as by at from his her he it an are were which be this
has had have not but one all new first they their been also after two who its time more other year world would when
there can up out only over most into some these city may many about people could said made under she we years then
than state long well part three between before during where both used such later since each him like while end
name high being game three through house day music best work life back known four team way first great group
school small good make must right play found film west east north south side just old five help here even point
data light water power home land book line sea air fire love word road state river field story event world`

// tokenWords returns the words that each count as exactly one token, with and
// without a leading space, in every loaded encoding.
func tokenWords() []string {
	wordsOnce.Do(func() {
		cs, err := loadCodecs()
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, w := range strings.Fields(candidateWords) {
			if seen[w] {
				continue
			}
			seen[w] = true
			ok := true
			for _, c := range cs {
				n1, err1 := c.Count(w)
				n2, err2 := c.Count(" " + w)
				ok = ok && err1 == nil && err2 == nil && n1 == 1 && n2 == 1
			}
			if ok {
				words = append(words, w)
			}
		}
	})
	return words
}

// counter counts tokens with one encoding. Counts of short strings (roles,
// names, repeated system prompts) are cached: tokenizing is the costliest
// step of a small request.
type counter struct {
	codec *tokencount.Counter
	cache *countCache
}

const (
	countCacheEntries  = 8192
	countCacheMaxBytes = 2048
)

type countCache struct {
	mu sync.RWMutex
	m  map[string]int
}

func newCounter(c *tokencount.Counter) counter {
	return counter{codec: c, cache: &countCache{m: make(map[string]int, countCacheEntries)}}
}

func (c counter) count(s string) int {
	if s == "" {
		return 0
	}
	cacheable := len(s) <= countCacheMaxBytes
	if cacheable {
		c.cache.mu.RLock()
		n, ok := c.cache.m[s]
		c.cache.mu.RUnlock()
		if ok {
			return n
		}
	}
	n, err := c.codec.Count(s)
	if err != nil {
		// Count only fails on regexp timeouts, which are not configured;
		// fall back to the usual 4 characters per token.
		return (len(s) + 3) / 4
	}
	if cacheable {
		c.cache.mu.Lock()
		if len(c.cache.m) >= countCacheEntries {
			clear(c.cache.m)
		}
		c.cache.m[s] = n
		c.cache.mu.Unlock()
	}
	return n
}

// promptTokens counts a chat prompt the way OpenAI bills it for current
// models (openai-cookbook "How to count tokens"): 3 tokens per message plus
// its role, content and name (+1 for a name), plus 3 priming the reply.
func (c counter) promptTokens(msgs []chatMessage) int {
	n := 3
	for _, m := range msgs {
		n += 3 + c.count(m.Role) + c.count(m.text())
		if m.Name != "" {
			n += 1 + c.count(m.Name)
		}
	}
	return n
}

// completionText returns text of exactly n tokens, built from words chosen
// by rng. The first word has no leading space.
func completionText(n int, next func(int) int) string {
	ws := tokenWords()
	if n <= 0 || len(ws) == 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(n * 6)
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(ws[next(len(ws))])
	}
	return b.String()
}
