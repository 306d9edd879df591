package rawjson

import "strconv"

// scanner checks JSON text the way encoding/json's scanner does, without
// recursion: the open arrays and objects are kept on a stack.
type scanner struct {
	b []byte
	i int
}

// value scans one value, and the white space before it.
func (s *scanner) value() error {
	var open []byte // '{' or '[' per open container
	for {
		s.space()
		if s.i < len(s.b) && (s.b[s.i] == '{' || s.b[s.i] == '[') {
			c := s.b[s.i]
			if len(open) == maxDepth {
				return s.fail("exceeded max depth")
			}
			s.i++
			s.space()
			if !s.next(closer(c)) {
				open = append(open, c)
				if c == '{' {
					if _, err := s.key(); err != nil {
						return err
					}
				}
				continue
			}
		} else if err := s.scalar(); err != nil {
			return err
		}
		var err error
		if open, err = s.close(open); err != nil || len(open) == 0 {
			return err
		}
	}
}

// close follows a complete value inside the open containers: it closes
// those that end, up to one that goes on with a comma (and, in an object,
// the next key). It returns the containers still open.
func (s *scanner) close(open []byte) ([]byte, error) {
	for len(open) > 0 {
		top := open[len(open)-1]
		s.space()
		if s.next(',') {
			if top == '{' {
				_, err := s.key()
				return open, err
			}
			return open, nil
		}
		if !s.next(closer(top)) {
			if top == '{' {
				return nil, s.unexpected("after object key:value pair")
			}
			return nil, s.unexpected("after array element")
		}
		open = open[:len(open)-1]
	}
	return open, nil
}

func closer(open byte) byte {
	if open == '{' {
		return '}'
	}
	return ']'
}

// key scans an object member's name and the colon after it, and returns
// the name's raw string.
func (s *scanner) key() ([]byte, error) {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, s.unexpected("looking for beginning of object key string")
	}
	start := s.i
	if err := s.str(); err != nil {
		return nil, err
	}
	name := s.b[start:s.i]
	s.space()
	if !s.next(':') {
		return nil, s.unexpected("after object key")
	}
	return name, nil
}

// scalar scans a string, number or literal.
func (s *scanner) scalar() error {
	if s.i >= len(s.b) {
		return s.unexpected("looking for beginning of value")
	}
	switch c := s.b[s.i]; {
	case c == '"':
		return s.str()
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.unexpected("looking for beginning of value")
}

// str scans a string: no control characters, only JSON's escapes.
func (s *scanner) str() error {
	s.i++ // the opening quote
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return nil
		case c < 0x20:
			return s.unexpected("in string literal")
		case c == '\\':
			s.i++
			if err := s.escape(); err != nil {
				return err
			}
		default:
			s.i++
		}
	}
	return s.unexpected("")
}

// escape scans what follows a backslash.
func (s *scanner) escape() error {
	if s.i >= len(s.b) {
		return s.unexpected("")
	}
	switch s.b[s.i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i++
		return nil
	case 'u':
		s.i++
		for range 4 {
			if s.i >= len(s.b) || !isHex(s.b[s.i]) {
				return s.unexpected("in \\u hexadecimal character escape")
			}
			s.i++
		}
		return nil
	}
	return s.unexpected("in string escape code")
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *scanner) number() error {
	s.next('-')
	if s.next('0') {
		// no more integer digits
	} else if !s.digits() {
		return s.unexpected("in numeric literal")
	}
	if s.next('.') && !s.digits() {
		return s.unexpected("after decimal point in numeric literal")
	}
	if s.next('e') || s.next('E') {
		if !s.next('+') {
			s.next('-')
		}
		if !s.digits() {
			return s.unexpected("in exponent of numeric literal")
		}
	}
	return nil
}

// digits scans one or more decimal digits.
func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

func (s *scanner) literal(word string) error {
	for i := range len(word) {
		if s.i >= len(s.b) || s.b[s.i] != word[i] {
			return s.unexpected("in literal " + word)
		}
		s.i++
	}
	return nil
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next consumes c if it is the next byte.
func (s *scanner) next(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) fail(msg string) error { return &SyntaxError{Offset: s.i, msg: msg} }

// unexpected reports the byte at the cursor, or the end of the input.
func (s *scanner) unexpected(context string) error {
	if s.i >= len(s.b) {
		return s.fail("unexpected end of JSON input")
	}
	return s.fail("invalid character " + quoteChar(s.b[s.i]) + " " + context)
}

// quoteChar formats c for an error message.
func quoteChar(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	q := strconv.Quote(string(rune(c)))
	return "'" + q[1:len(q)-1] + "'"
}
