package sysfs

import (
	"maps"
	"strings"
	"testing"
)

func TestParseCharMajors(t *testing.T) {
	// As a real H200 server's /proc/devices has it, shortened.
	real := "Character devices:\n  1 mem\n  4 /dev/vc/0\n  4 tty\n195 nvidia\n195 nvidiactl\n238 nvidia-uvm\n241 nvidia-caps\n\nBlock devices:\n  7 loop\n254 virtblk\n"
	tests := []struct {
		in   string
		want map[string]int
	}{
		{real, map[string]int{"mem": 1, "/dev/vc/0": 4, "tty": 4, "nvidia": 195, "nvidiactl": 195, "nvidia-uvm": 238, "nvidia-caps": 241}},
		{"Block devices:\n  8 sd\n", map[string]int{}},
		{"Character devices:\n195 nvidia-frontend\nbad line\n-1 neg\n99999 big\n 12\n\n", map[string]int{"nvidia-frontend": 195}},
		{"Character devices:\n10 misc\n11 misc\n", map[string]int{"misc": 10}},
		{"", map[string]int{}},
	}
	for _, tt := range tests {
		if got := ParseCharMajors([]byte(tt.in)); !maps.Equal(got, tt.want) {
			t.Errorf("ParseCharMajors(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// FuzzParseCharMajors: whatever the file holds, every entry is a major
// of 0-4095 and a name the file has, after a space.
func FuzzParseCharMajors(f *testing.F) {
	f.Add([]byte("Character devices:\n195 nvidia\n238 nvidia-uvm\n\nBlock devices:\n  8 sd\n"))
	f.Add([]byte("Character devices:\n  1 mem\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for name, major := range ParseCharMajors(b) {
			if major < 0 || major > 4095 || name == "" || strings.TrimSpace(name) != name {
				t.Fatalf("entry %q → %d", name, major)
			}
			if !strings.Contains(string(b), " "+name) {
				t.Fatalf("%q is not in %q", name, b)
			}
		}
	})
}

func TestPCIeSwitch(t *testing.T) {
	tests := []struct {
		path, self, want string
	}{
		{"/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0", "0000:18:00.0", "0000:16:00.0"},
		{"/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0", "0000:1a:00.0", "0000:16:00.0"},
		{"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0", "0000:01:00.0", ""},
		{"/sys/devices/pci0000:00/0000:00:02.0", "0000:00:02.0", ""},
		{"/sys/devices/pci0000:00/0000:00:1c.0/0000:02:00.0/0000:03:00.0", "0000:03:00.0", "0000:02:00.0"},
		{"/sys/devices/platform/simple-framebuffer.0", "", ""},
	}
	for _, tt := range tests {
		if got := ParsePCIe(tt.path).Switch(tt.self); got != tt.want {
			t.Errorf("Switch of %s = %q, want %q", tt.path, got, tt.want)
		}
	}
}
