package abnf

import (
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
		req, err := ParseRequest(s)
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

func FuzzValidRequestID(f *testing.F) {
	for _, s := range []string{"1234", "a-", "-a", strings.Repeat("a", 65), "a_b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidRequestID(s)
		valid := len(s) >= 1 && len(s) <= 64 && isAlnum(s[0])
		for i := 0; valid && i < len(s); i++ {
			valid = isAlnum(s[i]) || s[i] == '-'
		}
		if (err == nil) != valid {
			t.Fatalf("ValidRequestID(%q) = %v, want valid=%v", s, err, valid)
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
