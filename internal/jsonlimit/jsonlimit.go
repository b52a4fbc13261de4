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

// Scanner checks a JSON text fed to it in pieces. A string's length counts
// each escape sequence as one byte (so that re-encoding a checked value,
// which may escape more, never makes it longer) and every other byte as
// itself. The zero Scanner enforces no limit; it is not safe for
// concurrent use.
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
	// escape counts the bytes of an escape sequence still to skip; -1
	// right after a backslash.
	escape int
	length int
	err    *Error
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
		switch {
		case s.escape == -1: // the byte after a backslash
			s.escape = 0
			if c == 'u' {
				s.escape = 4
			}
			return nil
		case s.escape > 0:
			s.escape--
			return nil
		case c == '"':
			s.inString = false
			return nil
		case c == '\\':
			s.escape = -1
		}
		s.length++
		if lim := s.limits.MaxKeyBytes; s.isKey && lim > 0 && s.length > lim {
			return &Error{What: Key, Limit: lim}
		}
		if lim := s.limits.MaxStringBytes; !s.isKey && lim > 0 && s.length > lim {
			return &Error{What: Str, Limit: lim}
		}
		return nil
	}
	switch c {
	case '"':
		s.inString, s.isKey, s.length, s.escape = true, s.expectKey, 0, 0
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
