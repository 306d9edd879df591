package request

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestParseDeviceKeys(t *testing.T) {
	tests := []struct {
		in   string
		want []string // nil: an error
	}{
		{"tty13", []string{"tty13"}},
		{"tty48,tty17", []string{"tty48", "tty17"}},
		{"0000:03:00.0,0000:04:00.0", []string{"0000:03:00.0", "0000:04:00.0"}},
		{"a_b-c.d:e", []string{"a_b-c.d:e"}},
		{strings.Repeat("k", 64), []string{strings.Repeat("k", 64)}},
		{strings.Repeat("k", 65), nil},
		{"", nil},
		{",", nil},
		{"tty1,", nil},
		{",tty1", nil},
		{"tty1,,tty2", nil},
		{"tty1,tty1", nil},
		{"tty 1", nil},
		{" tty1", nil},
		{"/sys/devices/platform/x", nil},
		{"tty1;tty2", nil},
		{"ttyé", nil},
	}
	for _, tt := range tests {
		got, err := ParseDeviceKeys(tt.in)
		if tt.want == nil {
			if err == nil {
				t.Errorf("%q: accepted as %q", tt.in, got)
			} else if _, ok := err.(*Error); !ok {
				t.Errorf("%q: error %v is not *Error", tt.in, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%q: got %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// ParseSharedDeviceKeys takes a key named twice, and nothing else that
// ParseDeviceKeys refuses.
func TestParseSharedDeviceKeys(t *testing.T) {
	if got, err := ParseSharedDeviceKeys("kvm,tty1,kvm"); err != nil || !slices.Equal(got, []string{"kvm", "tty1", "kvm"}) {
		t.Errorf("kvm,tty1,kvm: got %q, %v", got, err)
	}
	for _, in := range []string{"", "kvm,", "kvm,,kvm", "a/b"} {
		if got, err := ParseSharedDeviceKeys(in); err == nil {
			t.Errorf("%q: accepted as %q", in, got)
		}
	}
}

// keyList is the grammar of CDI_REQUEST_DEVICES as a regular expression,
// an oracle independent of the parser (duplicates are checked apart).
var keyList = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}(,[A-Za-z0-9._:-]{1,64})*$`)

func FuzzParseDeviceKeys(f *testing.F) {
	for _, s := range []string{"tty13", "tty48,tty17", "0000:03:00.0", "a,a", ",", "x/y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		keys, err := ParseDeviceKeys(s)
		unique := true
		if keyList.MatchString(s) {
			parts := strings.Split(s, ",")
			slices.Sort(parts)
			unique = len(slices.Compact(parts)) == len(strings.Split(s, ","))
		}
		want := keyList.MatchString(s) && unique
		if (err == nil) != want {
			t.Fatalf("%q: err %v, grammar says %v", s, err, want)
		}
		if err == nil && strings.Join(keys, ",") != s {
			t.Fatalf("round trip: %q -> %q", s, keys)
		}
	})
}

func TestIsPCIAddr(t *testing.T) {
	for s, want := range map[string]bool{
		"0000:03:00.0": true, "0000:ff:1f.7": true, "0000:03:00.8": false, "0000:03:20.0": false,
		"0000:03:00.0 ": false, "0000:0G:00.0": false, "03:00.0": false, "0000:03:00.A": false, "0000:AB:00.0": false,
	} {
		if IsPCIAddr(s) != want {
			t.Errorf("IsPCIAddr(%q) != %v", s, want)
		}
	}
}
