package rawjson

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// Field is one member of a JSON object whose members keep their order.
type Field struct {
	Key   string
	Value any
}

// EncodeObject renders fields as one JSON object indented with two spaces,
// members in the given order, followed by a newline: what
// json.MarshalIndent would print for each member, byte for byte. The
// protocol wants cdiVersion first, which map and struct encoding cannot
// promise together with dynamic keys.
//
// The values of every answer but DEVICES (strings, ints, lists of them)
// are written here directly. encoding/json would do the same, but its
// first use in a process costs about a tenth of a millisecond of
// reflection, a third of what INFO may take; other values still go
// through it.
func EncodeObject(fields []Field) ([]byte, error) {
	b := make([]byte, 0, 256)
	b = append(b, "{\n"...)
	for i, f := range fields {
		b = append(b, "  "...)
		b = AppendString(b, f.Key)
		b = append(b, ": "...)
		var err error
		if b, err = appendValue(b, f.Value); err != nil {
			return nil, err
		}
		if i < len(fields)-1 {
			b = append(b, ',')
		}
		b = append(b, '\n')
	}
	return append(b, "}\n"...), nil
}

// appendValue appends v as a member value at the first level of
// indentation.
func appendValue(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case string:
		return AppendString(b, v), nil
	case int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case []string:
		return appendList(b, v, AppendString), nil
	case []int:
		return appendList(b, v, func(b []byte, n int) []byte { return strconv.AppendInt(b, int64(n), 10) }), nil
	}
	j, err := json.MarshalIndent(v, "  ", "  ")
	return append(b, j...), err
}

// appendList appends a list the way json.MarshalIndent(v, "  ", "  ")
// does: null for nil, [] when empty, else one element per line.
func appendList[T any](b []byte, list []T, elem func([]byte, T) []byte) []byte {
	switch {
	case list == nil:
		return append(b, "null"...)
	case len(list) == 0:
		return append(b, "[]"...)
	}
	b = append(b, '[')
	for i, v := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n    "...)
		b = elem(b, v)
	}
	return append(b, "\n  ]"...)
}

// AppendString appends s as a JSON string exactly as encoding/json writes
// it: HTML-sensitive and control characters escaped, invalid UTF-8 as
// \ufffd, and U+2028 and U+2029 escaped.
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}

// NonNil returns s, or an empty slice when s is nil, so that a list is
// printed as [] rather than null.
func NonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
