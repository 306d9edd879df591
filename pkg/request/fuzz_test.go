package request

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseRequest checks that accepted requests round-trip exactly (nothing
// is trimmed or normalised) and that every accepted part obeys the grammar.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{"gpu:1", "gpu:1,gpu-memory:2048Mi", "tty:01", "a:2147483647", "x-y:1,x:2", ",", "é:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		req, err := Parse(s)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %v is not *Error", err)
			}
			return
		}
		if got := req.String(); got != s {
			t.Fatalf("round trip: %q -> %q", s, got)
		}
		seen := map[Spec]bool{}
		for _, it := range req.Items {
			if it.Amount < 1 || it.Amount > MaxAmount {
				t.Fatalf("amount %d out of range", it.Amount)
			}
			if ValidType(it.Spec.Type) != nil || it.Spec.Subtype != "" && ValidSubtype(it.Spec.Subtype) != nil {
				t.Fatalf("accepted invalid spec %+v", it.Spec)
			}
			if seen[it.Spec] {
				t.Fatalf("duplicate spec %v accepted", it.Spec)
			}
			seen[it.Spec] = true
		}
	})
}

// The grammar's rules written as regular expressions, an oracle
// independent of the hand-written checks:
//
//	resource-type    = ALPHA *15alnum
//	resource-subtype = 1*15alnum
//	request-id       = alnum *63alnum-hyp
var (
	typeRE      = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{0,15}$`)
	subtypeRE   = regexp.MustCompile(`^[A-Za-z0-9]{1,15}$`)
	requestIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,63}$`)
)

// FuzzValidRequestID checks ValidRequestID, ValidType and ValidSubtype
// against the ABNF as regular expressions.
func FuzzValidRequestID(f *testing.F) {
	for _, s := range []string{"1234", "a-", "-a", strings.Repeat("a", 64), strings.Repeat("a", 65), "a_b", "gpu", "9gpu", "é", "a\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range []struct {
			name  string
			valid func(string) error
			re    *regexp.Regexp
		}{{"ValidRequestID", ValidRequestID, requestIDRE}, {"ValidType", ValidType, typeRE}, {"ValidSubtype", ValidSubtype, subtypeRE}} {
			if err := c.valid(s); (err == nil) != c.re.MatchString(s) {
				t.Fatalf("%s(%q) = %v; the grammar says valid=%v", c.name, s, err, c.re.MatchString(s))
			}
		}
	})
}

func FuzzParseNUMA(f *testing.F) {
	for _, s := range []string{"0", "0,1", "1,1", "", "-1", "01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		nodes, err := ParseNUMA(s)
		if err != nil {
			return
		}
		// Every accepted node appears in the input, and no node repeats.
		fields := strings.Split(s, ",")
		seen := map[int]bool{}
		for _, n := range nodes {
			if n < 0 || seen[n] {
				t.Fatalf("bad node list %v from %q", nodes, s)
			}
			seen[n] = true
		}
		for _, f := range fields {
			n, err := strconv.Atoi(f)
			if err != nil || !seen[n] {
				t.Fatalf("field %q of %q missing from %v", f, s, nodes)
			}
		}
		// Formatting and parsing again gives the same list.
		again, err := ParseNUMA(FormatNUMA(nodes))
		if err != nil || !slices.Equal(again, nodes) {
			t.Fatalf("FormatNUMA(%v) = %q, parsed back as %v, %v", nodes, FormatNUMA(nodes), again, err)
		}
	})
}
