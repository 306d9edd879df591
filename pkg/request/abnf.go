// Package request holds a request's domain types and the grammar of the
// CDI exec protocol that reads and writes them (docs/protocol.md): resource
// types, subtypes and specs, request ids, the CDI_REQUEST list and the
// CDI_REQUEST_NUMA_LOCALITY list.
//
// Only ASCII letters and digits count as ALPHA and DIGIT. Nothing is trimmed.
package request

import (
	"fmt"
	"strconv"
	"strings"
)

// Length limits from the grammar.
const (
	MaxTypeLen      = 16 // resource-type = ALPHA *15alnum
	MaxSubtypeLen   = 15 // resource-subtype = 1*15alnum
	MaxRequestIDLen = 64 // request-id = alnum *63alnum-hyp
	MaxAmount       = 1<<31 - 1
)

// Error reports which part of an input broke the grammar and why.
type Error struct {
	Part   string // the grammar rule, for example "resource-type" or "amount"
	Value  string // the offending text
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid %s %q: %s", e.Part, e.Value, e.Reason)
}

func isAlpha(c byte) bool { return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlnum(c byte) bool { return isAlpha(c) || isDigit(c) }

// checkAlnum reports the first byte of s that is not an ASCII letter or digit
// (or hyphen, when hyphen is true).
func checkAlnum(part, s string, hyphen bool) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isAlnum(c) || hyphen && c == '-' {
			continue
		}
		return &Error{Part: part, Value: s, Reason: fmt.Sprintf("character %q at offset %d is not allowed", c, i)}
	}
	return nil
}

// token is the grammar's rule for a run of ASCII letters and digits.
type token struct {
	part   string
	max    int
	first  func(byte) bool // what the first character must be; nil for any
	starts string          // first's rule, for the error
	hyphen bool            // hyphens allowed
}

func (t token) check(s string) error {
	switch {
	case s == "":
		return &Error{Part: t.part, Value: s, Reason: "empty"}
	case len(s) > t.max:
		return &Error{Part: t.part, Value: s, Reason: fmt.Sprintf("longer than %d characters", t.max)}
	case t.first != nil && !t.first(s[0]):
		return &Error{Part: t.part, Value: s, Reason: "must start with " + t.starts}
	}
	return checkAlnum(t.part, s, t.hyphen)
}

// ValidType checks a resource-type.
func ValidType(s string) error {
	return token{part: "resource-type", max: MaxTypeLen, first: isAlpha, starts: "an ASCII letter"}.check(s)
}

// ValidSubtype checks a resource-subtype.
func ValidSubtype(s string) error {
	return token{part: "resource-subtype", max: MaxSubtypeLen}.check(s)
}

// ValidRequestID checks a request-id.
func ValidRequestID(s string) error {
	return token{part: "request-id", max: MaxRequestIDLen, first: isAlnum, starts: "an ASCII letter or digit", hyphen: true}.check(s)
}

// Spec is a resource-spec: a type and an optional subtype.
type Spec struct {
	Type    string
	Subtype string // empty when the spec is a bare type
}

// String returns the spec as written in the protocol.
func (s Spec) String() string {
	if s.Subtype == "" {
		return s.Type
	}
	return s.Type + "-" + s.Subtype
}

// ParseSpec parses a resource-spec. A resource-type never contains a hyphen,
// so the first hyphen separates type and subtype.
func ParseSpec(s string) (Spec, error) {
	typ, sub, hasSub := strings.Cut(s, "-")
	if err := ValidType(typ); err != nil {
		return Spec{}, &Error{Part: "resource-spec", Value: s, Reason: "type " + err.(*Error).Reason}
	}
	if hasSub {
		if err := ValidSubtype(sub); err != nil {
			return Spec{}, &Error{Part: "resource-spec", Value: s, Reason: "subtype " + err.(*Error).Reason}
		}
	}
	return Spec{Type: typ, Subtype: sub}, nil
}

// ParseAmount parses an amount: a positive decimal integer without sign or
// leading zeros, at most MaxAmount.
func ParseAmount(s string) (int, error) {
	const part = "amount"
	switch {
	case s == "":
		return 0, &Error{Part: part, Value: s, Reason: "empty"}
	case s[0] == '0':
		if s == "0" {
			return 0, &Error{Part: part, Value: s, Reason: "must be positive"}
		}
		return 0, &Error{Part: part, Value: s, Reason: "leading zeros are not allowed"}
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, &Error{Part: part, Value: s, Reason: "must be a decimal integer without sign or unit"}
		}
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, &Error{Part: part, Value: s, Reason: fmt.Sprintf("larger than %d", MaxAmount)}
	}
	return int(n), nil
}

// Item is one resource-spec and the amount requested of it.
type Item struct {
	Spec   Spec
	Amount int
}

// Request is a parsed CDI_REQUEST.
type Request struct {
	Items []Item
}

// String returns the request in its wire form.
func (r Request) String() string {
	var b strings.Builder
	for i, it := range r.Items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(it.Spec.String())
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(it.Amount))
	}
	return b.String()
}

// Specs parses only the resource-specs of a CDI_REQUEST value,
// leaving the amounts unchecked. Callers use it to check every spec before
// any amount, as the protocol's order of checks requires. Each spec may
// appear only once.
func Specs(s string) ([]Spec, error) {
	if s == "" {
		return nil, &Error{Part: "request", Value: s, Reason: "empty"}
	}
	items := strings.Split(s, ",")
	specs := make([]Spec, 0, len(items))
	seen := make(map[Spec]bool, len(items))
	for _, item := range items {
		if item == "" {
			return nil, &Error{Part: "request", Value: s, Reason: "empty item"}
		}
		raw, _, ok := strings.Cut(item, ":")
		if !ok {
			return nil, &Error{Part: "request item", Value: item, Reason: `missing ":<amount>"`}
		}
		spec, err := ParseSpec(raw)
		if err != nil {
			return nil, err
		}
		if seen[spec] {
			return nil, &Error{Part: "request", Value: s, Reason: fmt.Sprintf("resource-spec %q appears more than once", raw)}
		}
		seen[spec] = true
		specs = append(specs, spec)
	}
	return specs, nil
}

// Parse parses a CDI_REQUEST value: item *("," item), where
// item = resource-spec ":" amount.
func Parse(s string) (Request, error) {
	specs, err := Specs(s)
	if err != nil {
		return Request{}, err
	}
	req := Request{Items: make([]Item, len(specs))}
	rest := s
	for i, spec := range specs {
		var item string
		item, rest, _ = strings.Cut(rest, ",")
		_, amount, _ := strings.Cut(item, ":")
		n, err := ParseAmount(amount)
		if err != nil {
			return Request{}, &Error{Part: "amount of " + spec.String(), Value: amount, Reason: err.(*Error).Reason}
		}
		req.Items[i] = Item{Spec: spec, Amount: n}
	}
	return req, nil
}

// ParseNUMA parses a CDI_REQUEST_NUMA_LOCALITY value: a comma-separated list
// of non-negative decimal integers. Duplicates are dropped; the result keeps
// the order of first appearance.
func ParseNUMA(s string) ([]int, error) {
	const part = "NUMA node"
	if s == "" {
		return nil, &Error{Part: "NUMA locality", Value: s, Reason: "empty"}
	}
	var nodes []int
	for f := range strings.SplitSeq(s, ",") {
		if f == "" {
			return nil, &Error{Part: "NUMA locality", Value: s, Reason: "empty item"}
		}
		for i := 0; i < len(f); i++ {
			if !isDigit(f[i]) {
				return nil, &Error{Part: part, Value: f, Reason: "must be a non-negative decimal integer"}
			}
		}
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			return nil, &Error{Part: part, Value: f, Reason: "out of range"}
		}
		dup := false
		for _, m := range nodes {
			dup = dup || m == int(n)
		}
		if !dup {
			nodes = append(nodes, int(n))
		}
	}
	return nodes, nil
}

// FormatNUMA writes a CDI_REQUEST_NUMA_LOCALITY value: the nodes in the
// given order, comma-separated; "" for none.
func FormatNUMA(nodes []int) string {
	var b strings.Builder
	for i, n := range nodes {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}
