// Package jsonlimit bounds JSON while it streams: the length of object keys
// and of strings, and the nesting depth, checked byte by byte before a
// decoder buffers or builds anything. encoding/json (and encoding/json/v2's
// jsontext) bound only the depth, at 10,000 levels, and read a whole key or
// string into memory before they look at its length; this scanner is the
// check in front of them. It does not validate JSON otherwise: the decoder
// behind it does.
package jsonlimit

import (
	"fmt"
	"io"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits are the bounds a Scanner enforces; 0 means no limit.
type Limits struct {
	// MaxKeyBytes bounds an object key.
	MaxKeyBytes int
	// MaxStringBytes bounds a string value.
	MaxStringBytes int
	// MaxDepth bounds the nesting of objects and arrays: 1 is a flat
	// object or array.
	MaxDepth int
}

// What names the limit an Error reports.
type What string

// The limits an Error may report.
const (
	Key   What = "key"
	Str   What = "string"
	Depth What = "depth"
)

// Error is JSON past one of its Limits.
type Error struct {
	What What
	// Limit is the bound passed: bytes, or levels for Depth.
	Limit int
	// Offset is the offset of the byte that passed it.
	Offset int64
}

func (e *Error) Error() string {
	switch e.What {
	case Key:
		return fmt.Sprintf("a JSON object key is over the %d byte limit (at byte %d)", e.Limit, e.Offset)
	case Str:
		return fmt.Sprintf("a JSON string is over the %d byte limit (at byte %d)", e.Limit, e.Offset)
	}
	return fmt.Sprintf("JSON nests deeper than the %d level limit (at byte %d)", e.Limit, e.Offset)
}

// Scanner checks a JSON text fed to it in pieces. A string's length is
// the length in bytes of the string encoding/json decodes from it: an
// escape counts as the UTF-8 of what it stands for, and a byte that is not
// valid UTF-8 as the three bytes of U+FFFD that replace it. Encoding a
// checked value again therefore never makes it longer. The zero Scanner
// enforces no limit; it is not safe for concurrent use.
type Scanner struct {
	limits Limits
	offset int64
	depth  int
	// objects has bit i set when the container at depth i+1 is an object.
	objects []uint64
	// expectKey: the next string opens a member of an object.
	expectKey bool
	inString  bool
	isKey     bool
	// escape counts the hex digits of a \u escape still to read; -1 right
	// after a backslash. code accumulates them.
	escape int
	code   rune
	// highSurrogate: the last thing read was a \u escape of a high
	// surrogate, which a low one right after completes.
	highSurrogate bool
	// pending holds the bytes of a multi-byte UTF-8 sequence not yet whole.
	pending [utf8.UTFMax]byte
	npend   int
	length  int
	err     *Error
}

// NewScanner returns a Scanner enforcing l.
func NewScanner(l Limits) *Scanner { return &Scanner{limits: l} }

// Write scans p. It returns how many bytes of p lie before the first byte
// that passes a limit and, from that byte on, an *Error (every later call
// returns it again).
func (s *Scanner) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	for i, c := range p {
		if e := s.step(c); e != nil {
			e.Offset = s.offset + int64(i)
			s.err = e
			return i, e
		}
	}
	s.offset += int64(len(p))
	return len(p), nil
}

func (s *Scanner) step(c byte) *Error {
	if s.inString {
		return s.stringByte(c)
	}
	switch c {
	case '"':
		s.inString, s.isKey, s.length, s.escape = true, s.expectKey, 0, 0
		s.highSurrogate, s.npend = false, 0
		s.expectKey = false
	case '{', '[':
		s.depth++
		if lim := s.limits.MaxDepth; lim > 0 && s.depth > lim {
			return &Error{What: Depth, Limit: lim}
		}
		s.setObject(c == '{')
		s.expectKey = c == '{'
	case '}', ']':
		if s.depth > 0 {
			s.depth--
		}
		s.expectKey = false
	case ',':
		s.expectKey = s.inObject()
	case ':':
		s.expectKey = false
	}
	return nil
}

// stringByte scans a byte inside a string, counting what it decodes to.
func (s *Scanner) stringByte(c byte) *Error {
	switch {
	case s.escape == -1: // the byte after a backslash
		if c == 'u' {
			s.escape, s.code = 4, 0
			return nil
		}
		s.escape = 0
		s.highSurrogate = false
		return s.count(1)
	case s.escape > 0:
		s.code = s.code<<4 | rune(unhex(c))
		if s.escape--; s.escape > 0 {
			return nil
		}
		return s.count(s.escapedLen())
	case c >= utf8.RuneSelf:
		s.highSurrogate = false
		s.pending[s.npend] = c
		s.npend++
		return s.decodePending(false)
	}
	if e := s.decodePending(true); e != nil {
		return e
	}
	if c == '\\' {
		s.escape = -1
		return nil
	}
	s.highSurrogate = false
	if c == '"' {
		s.inString = false
		return nil
	}
	return s.count(1)
}

// escapedLen is the decoded length of the \u escape just read: a pair of
// surrogates decodes to 4 bytes (3 counted for the first, 1 for the
// second), a lone one to U+FFFD, as encoding/json decodes them.
func (s *Scanner) escapedLen() int {
	r := s.code
	switch {
	case utf16.IsSurrogate(r) && r >= 0xdc00 && s.highSurrogate:
		s.highSurrogate = false
		return 1
	case utf16.IsSurrogate(r):
		s.highSurrogate = r < 0xdc00
		return 3
	}
	s.highSurrogate = false
	return utf8.RuneLen(r)
}

// decodePending counts the whole UTF-8 sequences in pending as
// utf8.DecodeRune reads them (an invalid byte is U+FFFD, 3 bytes); with
// flush, what is left of a sequence that will not complete too.
func (s *Scanner) decodePending(flush bool) *Error {
	for s.npend > 0 && (flush || utf8.FullRune(s.pending[:s.npend])) {
		r, size := utf8.DecodeRune(s.pending[:s.npend])
		n := size
		if r == utf8.RuneError && size == 1 {
			n = 3
		}
		copy(s.pending[:], s.pending[size:s.npend])
		s.npend -= size
		if e := s.count(n); e != nil {
			return e
		}
	}
	return nil
}

// count adds n decoded bytes to the string's length.
func (s *Scanner) count(n int) *Error {
	s.length += n
	if lim := s.limits.MaxKeyBytes; s.isKey && lim > 0 && s.length > lim {
		return &Error{What: Key, Limit: lim}
	}
	if lim := s.limits.MaxStringBytes; !s.isKey && lim > 0 && s.length > lim {
		return &Error{What: Str, Limit: lim}
	}
	return nil
}

// unhex is the value of a hex digit; invalid JSON (any other byte) is the
// decoder's to refuse, so it counts as 0 here.
func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 0
}

// setObject records whether the container just opened is an object.
func (s *Scanner) setObject(object bool) {
	i := s.depth - 1
	for len(s.objects) <= i/64 {
		s.objects = append(s.objects, 0)
	}
	if object {
		s.objects[i/64] |= 1 << (i % 64)
	} else {
		s.objects[i/64] &^= 1 << (i % 64)
	}
}

func (s *Scanner) inObject() bool {
	i := s.depth - 1
	return i >= 0 && s.objects[i/64]&(1<<(i%64)) != 0
}

// Check scans a whole JSON text.
func Check(data []byte, l Limits) error {
	_, err := NewScanner(l).Write(data)
	return err
}

// NewReader returns a reader of r that stops, with the *Error, at the first
// byte past a limit: what it returns is checked, so a decoder reading
// through it never buffers more of a key or string than the limit allows.
func NewReader(r io.Reader, l Limits) io.Reader { return &reader{r: r, s: NewScanner(l)} }

type reader struct {
	r io.Reader
	s *Scanner
}

func (r *reader) Read(p []byte) (int, error) {
	if r.s.err != nil {
		return 0, r.s.err
	}
	n, err := r.r.Read(p)
	k, serr := r.s.Write(p[:n])
	if serr != nil {
		return k, serr
	}
	return n, err
}
