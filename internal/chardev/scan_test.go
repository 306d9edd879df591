package chardev

import (
	"testing"
)

func TestNatCompare(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		less bool
	}{
		{"ttyUSB2", "ttyUSB10", true}, {"ttyUSB10", "ttyUSB2", false}, {"video0", "video1", true},
		{"accel/accel0", "accel/accel1", true}, {"a", "ab", true}, {"x007", "x8", true},
	} {
		if got := natCompare(tt.a, tt.b) < 0; got != tt.less {
			t.Errorf("natCompare(%q, %q) < 0 = %v", tt.a, tt.b, got)
		}
	}
}

func TestKeySafe(t *testing.T) {
	for in, want := range map[string]string{
		"1a86:7523:A50285BI": "1a86:7523:A50285BI",
		"1a86:7523:a b/c":    "1a86:7523:a_b_c",
		"":                   "_",
	} {
		if got := keySafe(in); got != want {
			t.Errorf("keySafe(%q) = %q, want %q", in, got, want)
		}
	}
	long := keySafe(string(make([]byte, 100)))
	if len(long) != 64 {
		t.Errorf("long key: %d bytes", len(long))
	}
}

// Units that share an identity (a modem's nodes, each its own unit) are
// numbered in their order.
func TestAssignKeys(t *testing.T) {
	units := []*unit{{key: "2c7c:0125:X"}, {key: "kvm"}, {key: "2c7c:0125:X"}, {key: "2c7c:0125:X"}}
	assignKeys(units)
	var got []string
	for _, u := range units {
		got = append(got, u.key)
	}
	want := []string{"2c7c:0125:X-0", "kvm", "2c7c:0125:X-1", "2c7c:0125:X-2"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("keys %v, want %v", got, want)
		}
	}
}
