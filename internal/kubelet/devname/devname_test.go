package devname

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestName(t *testing.T) {
	tests := []struct {
		key, name string // name "": the key has no name
	}{
		{"tty13", "tty13"},
		{"card0", "card0"},
		{"0000:03:00.0", "pci-0000-03-00-0"},
		{"0000:af:1f.7", "pci-0000-af-1f-7"},
		{"0000:AF:1f.7", "x-0000-2-a-f-21f-17"},
		{"0000:03:00.8", "x-0000-203-200-18"},
		{"0000:03:20.0", "x-0000-203-220-10"},
		{"ttyS0", "x-tty-s0"},
		{"ttyUSB0", "x-tty-u-s-b0"},
		{"a-b", "x-a-0b"},
		{"-", "x--0"},
		{"a_b.c:d", "x-a-3b-1c-2d"},
		{"pci-0000-03-00-0", "x-pci-00000-003-000-00"},
		{"x", "x"},
		{"pci", "pci"},
		{strings.Repeat("k", 63), strings.Repeat("k", 63)},
		{strings.Repeat("k", 61), strings.Repeat("k", 61)},
		{strings.Repeat("k", 64), ""},                                     // plain only up to 63, escaped needs 66
		{"A" + strings.Repeat("k", 59), "x--a" + strings.Repeat("k", 59)}, // 63 characters
		{"A" + strings.Repeat("k", 60), ""},                               // 64
		{"", ""},
		{"tty 1", ""},
		{"ttyé", ""},
	}
	for _, tt := range tests {
		got, err := Name(tt.key)
		if tt.name == "" {
			if err == nil {
				t.Errorf("Name(%q) = %q, want an error", tt.key, got)
			}
			continue
		}
		if err != nil || got != tt.name {
			t.Errorf("Name(%q) = %q, %v; want %q", tt.key, got, err, tt.name)
			continue
		}
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
			t.Errorf("Name(%q) = %q is not a DNS label: %v", tt.key, got, errs)
		}
		if back, err := Key(got); err != nil || back != tt.key {
			t.Errorf("Key(%q) = %q, %v; want %q", got, back, err, tt.key)
		}
	}
}

func TestKeyRefusesOtherNames(t *testing.T) {
	for _, name := range []string{
		"", "x-", "x-tty13", "x-0000-203-200-10", "pci-0000-03-00-8", "pci-0000-03-20-0", "pci-0000-03-00",
		"tty-13", "x-a-", "x-a-4", "x-a-9b", "x-A", "Tty13", "x-a--", "-x", "x-tty_1",
		"pci-0000-ag-00-0", strings.Repeat("k", 64),
	} {
		if key, err := Key(name); err == nil {
			t.Errorf("Key(%q) = %q, want an error", name, key)
		}
	}
}
