package request

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestValidType(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{"gpu", true},
		{"a", true},
		{"A1", true},
		{strings.Repeat("a", 16), true},
		{strings.Repeat("a", 17), false},
		{"", false},
		{"1gpu", false},
		{"gpu-x", false},
		{"gp_u", false},
		{"gpu ", false},
		{" gpu", false},
		{"gpü", false},
		{"ǵpu", false},
		{"gpu.x", false},
		{"gpu/x", false},
	}
	for _, tt := range tests {
		err := ValidType(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ValidType(%q) = %v, want ok=%v", tt.in, err, tt.ok)
		}
	}
}

func TestValidRequestID(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{"1234", true},
		{"a", true},
		{"0", true},
		{"pod-a-", true}, // may end in a hyphen
		{"a--b", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"1" + strings.Repeat("-", 63), true},
		{"", false},
		{"-a", false},
		{"a_b", false},
		{"a.b", false},
		{"a b", false},
		{"a/b", false},
		{"ä", false},
		{"abc\n", false},
	}
	for _, tt := range tests {
		err := ValidRequestID(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ValidRequestID(%q) = %v, want ok=%v", tt.in, err, tt.ok)
		}
	}
}

func TestParseSpec(t *testing.T) {
	tests := []struct {
		in   string
		want Spec
		ok   bool
	}{
		{"gpu", Spec{Type: "gpu"}, true},
		{"gpu-memory", Spec{Type: "gpu", Subtype: "memory"}, true},
		{"gpu-" + strings.Repeat("m", 15), Spec{Type: "gpu", Subtype: strings.Repeat("m", 15)}, true},
		{"gpu-" + strings.Repeat("m", 16), Spec{}, false},
		{"gpu-1", Spec{Type: "gpu", Subtype: "1"}, true},
		{"gpu-", Spec{}, false},
		{"gpu-a-b", Spec{}, false},
		{"-gpu", Spec{}, false},
		{"", Spec{}, false},
		{"9gpu-a", Spec{}, false},
	}
	for _, tt := range tests {
		got, err := ParseSpec(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if err == nil && got.String() != tt.in {
			t.Errorf("ParseSpec(%q).String() = %q", tt.in, got.String())
		}
	}
}

func TestParseRequest(t *testing.T) {
	tests := []struct {
		in      string
		want    []Item
		errPart string // the Part of the expected error; empty for success
	}{
		{"gpu:1", []Item{{Spec{"gpu", ""}, 1}}, ""},
		{"gpu:2,gpu-memory:2048", []Item{{Spec{"gpu", ""}, 2}, {Spec{"gpu", "memory"}, 2048}}, ""},
		{"tty:2147483647", []Item{{Spec{"tty", ""}, MaxAmount}}, ""},
		{"tty:2147483648", nil, "amount of tty"},
		{"tty:99999999999999999999", nil, "amount of tty"},
		{"tty:0", nil, "amount of tty"},
		{"tty:01", nil, "amount of tty"},
		{"tty:+1", nil, "amount of tty"},
		{"tty:-1", nil, "amount of tty"},
		{"tty: 1", nil, "amount of tty"},
		{"tty:1 ", nil, "amount of tty"},
		{"tty:", nil, "amount of tty"},
		{"tty:1:2", nil, "amount of tty"},
		{"tty:1Mi", nil, "amount of tty"},
		{"tty:١", nil, "amount of tty"}, // Arabic-Indic digit one
		{"gpu:1,gpu-memory:2048Mi", nil, "amount of gpu-memory"},
		{"", nil, "request"},
		{"tty", nil, "request item"},
		{"tty:1,", nil, "request"},
		{",tty:1", nil, "request"},
		{"tty:1,,gpu:1", nil, "request"},
		{"tty:1,tty:2", nil, "request"},
		{"tty:1, gpu:1", nil, "resource-spec"},
		{"t_y:1", nil, "resource-spec"},
		{strings.Repeat("t", 17) + ":1", nil, "resource-spec"},
		{strings.Repeat("t", 16) + ":1", []Item{{Spec{strings.Repeat("t", 16), ""}, 1}}, ""},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if tt.errPart == "" {
			if err != nil || !reflect.DeepEqual(got.Items, tt.want) {
				t.Errorf("Parse(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Part != tt.errPart {
			t.Errorf("Parse(%q) error = %v; want part %q", tt.in, err, tt.errPart)
		}
	}
}

// Specs are checked before amounts: a broken amount does not hide the specs.
func TestRequestSpecsIgnoresAmounts(t *testing.T) {
	specs, err := Specs("gpu:1,gpu-memory:2048Mi")
	if err != nil {
		t.Fatal(err)
	}
	want := []Spec{{"gpu", ""}, {"gpu", "memory"}}
	if !reflect.DeepEqual(specs, want) {
		t.Fatalf("got %+v, want %+v", specs, want)
	}
}

func TestParseNUMA(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		ok   bool
	}{
		{"0", []int{0}, true},
		{"1,0", []int{1, 0}, true},
		{"0,0,1,0", []int{0, 1}, true},
		{"2147483647", []int{MaxAmount}, true},
		{"2147483648", nil, false},
		{"", nil, false},
		{"-1", nil, false},
		{"+1", nil, false},
		{"0,", nil, false},
		{",0", nil, false},
		{"0 ,1", nil, false},
		{"a", nil, false},
	}
	for _, tt := range tests {
		got, err := ParseNUMA(tt.in)
		if (err == nil) != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseNUMA(%q) = %v, %v; want %v ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func BenchmarkParseRequest(b *testing.B) {
	for b.Loop() {
		if _, err := Specs("gpu:2,gpu-memory:2048"); err != nil {
			b.Fatal(err)
		}
		if _, err := Parse("gpu:2,gpu-memory:2048"); err != nil {
			b.Fatal(err)
		}
	}
}
