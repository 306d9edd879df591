// Package rawjson reads JSON text without reflection: it checks that a text
// is one valid JSON value, walks the members of an object and decodes
// strings, accepting and decoding exactly what encoding/json does.
//
// A plugin reads one small config per process, and the first use of
// encoding/json's reflection in a fresh process costs more than the rest of
// an INFO. The shapes read on every call (the config's top level) go through
// this package; anything else still goes through encoding/json.
package rawjson

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth is encoding/json's limit on nested arrays and objects.
const maxDepth = 10000

// SyntaxError describes invalid JSON text.
type SyntaxError struct {
	Offset int // the byte offset of the error
	msg    string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("%s at offset %d", e.msg, e.Offset) }

// ErrNotObject is returned by Members for a value that is not an object,
// ErrNotArray by Elements for one that is not an array.
var (
	ErrNotObject = errors.New("not a JSON object")
	ErrNotArray  = errors.New("not a JSON array")
)

// Value checks that b holds exactly one JSON value, with white space around
// it allowed, and returns the value without that white space.
func Value(b []byte) ([]byte, error) {
	s := scanner{b: b}
	s.space()
	start := s.i
	if err := s.value(); err != nil {
		return nil, err
	}
	end := s.i
	s.space()
	if s.i < len(b) {
		return nil, s.fail("invalid character " + quoteChar(b[s.i]) + " after top-level value")
	}
	return b[start:end], nil
}

// Members calls fn with the decoded name and the raw value of each member
// of the object obj, in order, and stops at fn's first error. obj must be an
// object without white space around it, as Value returns it.
func Members(obj []byte, fn func(name string, value []byte) error) error {
	if len(obj) == 0 || obj[0] != '{' {
		return ErrNotObject
	}
	s := scanner{b: obj, i: 1}
	s.space()
	if s.next('}') {
		return nil
	}
	for {
		raw, err := s.key()
		if err != nil {
			return err
		}
		name, _ := String(raw)
		s.space()
		start := s.i
		if err := s.value(); err != nil {
			return err
		}
		if err := fn(name, obj[start:s.i]); err != nil {
			return err
		}
		s.space()
		switch {
		case s.next(','):
			s.space()
		case s.next('}'):
			return nil
		default:
			return s.fail("expected ',' or '}' after object member")
		}
	}
}

// Elements calls fn with the raw value of each element of the array arr,
// in order, and stops at fn's first error. arr must be an array without
// white space around it, as Value returns it.
func Elements(arr []byte, fn func(value []byte) error) error {
	if len(arr) == 0 || arr[0] != '[' {
		return ErrNotArray
	}
	s := scanner{b: arr, i: 1}
	s.space()
	if s.next(']') {
		return nil
	}
	for {
		s.space()
		start := s.i
		if err := s.value(); err != nil {
			return err
		}
		if err := fn(arr[start:s.i]); err != nil {
			return err
		}
		s.space()
		switch {
		case s.next(','):
		case s.next(']'):
			return nil
		default:
			return s.fail("expected ',' or ']' after array element")
		}
	}
}

// String decodes the JSON string value v, quotes included, as
// encoding/json does: escapes are resolved, and invalid UTF-8 and unpaired
// surrogates become U+FFFD.
func String(v []byte) (string, error) {
	s := scanner{b: v}
	if err := s.str(); err != nil {
		return "", err
	}
	if s.i != len(v) {
		return "", s.fail("data after the string")
	}
	body := v[1 : len(v)-1]
	if plain(body) {
		return string(body), nil
	}
	return unquote(body), nil
}

// plain reports whether a string body needs no decoding.
func plain(b []byte) bool {
	return bytes.IndexByte(b, '\\') < 0 && utf8.Valid(b)
}

// unquote decodes a valid string body with escapes or non-ASCII bytes.
func unquote(b []byte) string {
	out := make([]byte, 0, len(b)+2*utf8.UTFMax)
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '\\':
			var r rune
			r, i = escape(b, i)
			out = utf8.AppendRune(out, r)
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, n := utf8.DecodeRune(b[i:])
			out = utf8.AppendRune(out, r) // RuneError for invalid bytes
			i += n
		}
	}
	return string(out)
}

// escape decodes the escape sequence at b[i] and returns the rune and the
// index after it. A \u escape of a surrogate pairs with a following \u
// escape when the two form a valid pair; alone it stands for U+FFFD.
func escape(b []byte, i int) (rune, int) {
	switch c := b[i+1]; c {
	case 'b':
		return '\b', i + 2
	case 'f':
		return '\f', i + 2
	case 'n':
		return '\n', i + 2
	case 'r':
		return '\r', i + 2
	case 't':
		return '\t', i + 2
	case 'u':
		r := hex4(b[i+2:])
		i += 6
		if !utf16.IsSurrogate(r) {
			return r, i
		}
		if i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
			if pair := utf16.DecodeRune(r, hex4(b[i+2:])); pair != utf8.RuneError {
				return pair, i + 6
			}
		}
		return utf8.RuneError, i
	default: // '"', '\\', '/'
		return rune(c), i + 2
	}
}

// hex4 decodes four hex digits the scanner has checked.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
