package tokencount

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tiktoken-go/tokenizer"
)

// Counter counts tokens under one encoding. Safe for concurrent use.
type Counter struct {
	codec tokenizer.Codec
	// piece returns the length of the first piece of s, a non-empty ASCII
	// string, 0 when no piece starts at s[0]; nil: the codec counts every
	// text.
	piece func(s string) int
	// pieces maps a piece (at most maxPieceBytes) to its tokens; entries
	// counts them, so that the map is emptied past maxPieces.
	pieces  sync.Map
	entries atomic.Int64
}

const (
	// maxPieceBytes bounds the pieces remembered: words and short runs of
	// spaces or punctuation repeat, longer pieces (base64, long numbers
	// are split into 3 digits anyway) seldom do.
	maxPieceBytes = 32
	// maxPieces bounds the remembered pieces of one encoding (a few MiB).
	maxPieces = 1 << 15
)

var counters sync.Map // tokenizer.Encoding -> func() (*Counter, error)

// Get returns the process's counter of enc, built once: the codec's
// vocabulary and split pattern are loaded on the first call, and the
// pieces remembered are shared by every caller.
func Get(enc tokenizer.Encoding) (*Counter, error) {
	f, _ := counters.LoadOrStore(enc, sync.OnceValues(func() (*Counter, error) { return newCounter(enc) }))
	return f.(func() (*Counter, error))()
}

func newCounter(enc tokenizer.Encoding) (*Counter, error) {
	c, err := tokenizer.Get(enc)
	if err != nil {
		return nil, fmt.Errorf("tokencount: load %s: %w", enc, err)
	}
	cnt := &Counter{codec: c}
	switch enc {
	case tokenizer.O200kBase:
		cnt.piece = o200kPiece
	case tokenizer.Cl100kBase:
		cnt.piece = cl100kPiece
	}
	return cnt, nil
}

// Count returns the tokens of s. It fails only where the codec does.
func (c *Counter) Count(s string) (int, error) {
	if c.piece == nil || !isASCII(s) {
		return c.codec.Count(s)
	}
	total := 0
	for len(s) > 0 {
		k := c.piece(s)
		if k == 0 { // no piece starts here: the codec's split skips the byte
			s = s[1:]
			continue
		}
		n, err := c.pieceTokens(s[:k])
		if err != nil {
			return 0, err
		}
		total += n
		s = s[k:]
	}
	return total, nil
}

// pieceTokens returns the tokens of one piece of the split.
func (c *Counter) pieceTokens(p string) (int, error) {
	if len(p) > maxPieceBytes {
		return c.codec.Count(p)
	}
	if n, ok := c.pieces.Load(p); ok {
		return n.(int), nil
	}
	n, err := c.codec.Count(p)
	if err != nil {
		return 0, err
	}
	if c.entries.Add(1) > maxPieces {
		c.pieces.Clear()
		c.entries.Store(1)
	}
	// A copy: p shares the memory of the whole text.
	c.pieces.Store(string([]byte(p)), n)
	return n, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
