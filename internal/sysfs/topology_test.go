package sysfs

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParsePCIe(t *testing.T) {
	tests := []struct {
		path string
		want PCIe
	}{
		{"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
			PCIe{"pci0000:00", []string{"0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"}, "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"}},
		{"/sys/devices/pci0000:00/0000:00:02.0/drm/card0",
			PCIe{"pci0000:00", []string{"0000:00:02.0"}, "/sys/devices/pci0000:00/0000:00:02.0"}},
		{"/sys/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/ttyUSB0/tty/ttyUSB0",
			PCIe{"pci0000:00", []string{"0000:00:14.0"}, "/sys/devices/pci0000:00/0000:00:14.0"}},
		{"/sys/devices/platform/soc/fe9c0000.pcie/pci0000:00/0000:00:00.0/0000:01:00.0",
			PCIe{"pci0000:00", []string{"0000:00:00.0", "0000:01:00.0"}, "/sys/devices/platform/soc/fe9c0000.pcie/pci0000:00/0000:00:00.0/0000:01:00.0"}},
		{"/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0",
			PCIe{"pci0000:00", []string{"0000:00:0e.0", "10000:e0:06.0", "10000:e1:00.0"}, "/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0"}},
		{"/sys/devices/pci0000:40", PCIe{Root: "pci0000:40"}},
		{"/sys/devices/virtual/tty/tty13", PCIe{}},
		{"/sys/devices/platform/serial8250/tty/ttyS0", PCIe{}},
		{"/sys/devices/pnp0/00:00/00:00:0/00:00:0.0/tty/ttyS0", PCIe{}},
		{"/tmp/root/sys/devices/pci0000:00/0000:00:02.0", PCIe{}},
		{"/sys/devices/pciZZZZ:00/0000:00:02.0", PCIe{}},
		{"/sys/devices/pci0000:00/0000:00:02.8", PCIe{Root: "pci0000:00"}},
	}
	for _, tt := range tests {
		if got := ParsePCIe(tt.path); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParsePCIe(%q) = %+v, want %+v", tt.path, got, tt.want)
		}
	}
	p := ParsePCIe(tests[0].path)
	if got := p.Chain(); !reflect.DeepEqual(got, append([]string{"pci0000:00"}, p.Path...)) {
		t.Errorf("Chain() = %v", got)
	}
	if got := p.Bridges("0000:03:00.0"); !reflect.DeepEqual(got, p.Path[:3]) {
		t.Errorf("Bridges(self) = %v", got)
	}
	if got := p.Bridges(""); !reflect.DeepEqual(got, p.Path) {
		t.Errorf("Bridges(\"\") = %v", got)
	}
	if (PCIe{Root: "pci0000:40"}).Chain() != nil || (PCIe{}).Chain() != nil {
		t.Error("Chain of an unknown place is not nil")
	}
}

func FuzzParsePCIe(f *testing.F) {
	f.Add("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/drm/card0")
	f.Add("/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0")
	f.Fuzz(func(t *testing.T, path string) {
		p := ParsePCIe(path)
		if p.Root == "" && (p.Path != nil || p.Dir != "") {
			t.Fatalf("path without a root: %+v", p)
		}
		for _, fn := range p.Path {
			if !strings.Contains(path, "/"+fn) {
				t.Fatalf("%q is not in %q", fn, path)
			}
		}
		if len(p.Path) > 0 && (!strings.HasPrefix(path, p.Dir) || !strings.HasSuffix(p.Dir, "/"+p.Path[len(p.Path)-1])) {
			t.Fatalf("Dir %q does not end the path at %q", p.Dir, p.Path[len(p.Path)-1])
		}
	})
}

func TestParseList(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		ok   bool
	}{
		{"", []int{}, true},
		{"0", []int{0}, true},
		{"0-3", []int{0, 1, 2, 3}, true},
		{"0-1,4,6-7", []int{0, 1, 4, 6, 7}, true},
		{"3-1", nil, false},
		{"a", nil, false},
		{"1,", nil, false},
		{"-1", nil, false},
		{"+1", nil, false},
		{"0-99999999", nil, false},
	}
	for _, tt := range tests {
		got, err := ParseList(tt.in)
		if (err == nil) != tt.ok || tt.ok && !reflect.DeepEqual(nonNilInts(got), tt.want) {
			t.Errorf("ParseList(%q) = %v, %v", tt.in, got, err)
		}
		if tt.ok && FormatList(got) != tt.in {
			t.Errorf("FormatList(%v) = %q, want %q", got, FormatList(got), tt.in)
		}
	}
}

func nonNilInts(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}

func FuzzParseList(f *testing.F) {
	f.Add("0-3,8")
	f.Fuzz(func(t *testing.T, s string) {
		ns, err := ParseList(s)
		if err != nil {
			return
		}
		if len(ns) > 0 && ns[len(ns)-1] > maxListItem {
			t.Fatalf("%q gave %d", s, ns[len(ns)-1])
		}
		again, err := ParseList(FormatList(ns))
		if err != nil || !reflect.DeepEqual(nonNilInts(again), nonNilInts(ns)) {
			t.Fatalf("FormatList(%v) = %q parses to %v, %v", ns, FormatList(ns), again, err)
		}
	})
}

// nodeHost lays out /sys/devices/system/node with the given distance rows
// (a nil row leaves that node's distance file out) and online list.
func nodeHost(t *testing.T, online string, rows map[int]string) *Host {
	t.Helper()
	root := t.TempDir()
	base := filepath.Join(root, "sys/devices/system/node")
	for id, row := range rows {
		dir := filepath.Join(base, "node"+itoa(id))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if row != "-" {
			if err := os.WriteFile(filepath.Join(dir, "distance"), []byte(row+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if online != "" {
		if err := os.WriteFile(filepath.Join(base, "online"), []byte(online+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return NewHost(root)
}

func TestNUMADistances(t *testing.T) {
	ring := map[int]string{0: "10 16 22 28", 1: "28 10 16 22", 2: "22 28 10 16", 3: "16 22 28 10"}
	tests := []struct {
		name   string
		online string
		rows   map[int]string
		want   map[int]map[int]int
		ok     bool
	}{
		{"asymmetric ring", "0-3", ring, map[int]map[int]int{
			0: {0: 10, 1: 16, 2: 22, 3: 28}, 1: {0: 28, 1: 10, 2: 16, 3: 22},
			2: {0: 22, 1: 28, 2: 10, 3: 16}, 3: {0: 16, 1: 22, 2: 28, 3: 10}}, true},
		{"sparse node ids", "0,2", map[int]string{0: "10 20", 2: "20 10"}, map[int]map[int]int{0: {0: 10, 2: 20}, 2: {0: 20, 2: 10}}, true},
		{"no online file: the directories", "", map[int]string{0: "10 21", 1: "21 10"}, map[int]map[int]int{0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}}, true},
		{"one node", "0", map[int]string{0: "10"}, map[int]map[int]int{0: {0: 10}}, true},
		{"distance files missing", "0-1", map[int]string{0: "-", 1: "-"}, nil, true},
		{"one distance file missing", "0-1", map[int]string{0: "10 21", 1: "-"}, nil, true},
		{"no nodes", "", nil, nil, true},
		{"short row", "0-1", map[int]string{0: "10", 1: "21 10"}, nil, false},
		{"garbage", "0-1", map[int]string{0: "10 x", 1: "21 10"}, nil, false},
		{"out of range", "0-1", map[int]string{0: "10 256", 1: "21 10"}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := nodeHost(t, tt.online, tt.rows).NUMADistances()
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNUMANodes(t *testing.T) {
	h := nodeHost(t, "", map[int]string{2: "10", 0: "10", 10: "10"})
	got, err := h.NUMANodes()
	if err != nil || !reflect.DeepEqual(got, []int{0, 2, 10}) {
		t.Fatalf("NUMANodes() = %v, %v", got, err)
	}
	if got, err := NewHost(t.TempDir()).NUMANodes(); err != nil || got != nil {
		t.Fatalf("no node directory: %v, %v", got, err)
	}
}

// Place and ClassDevice on a tree shaped like the kernel's: a tty behind a
// USB controller on NUMA node 1, one on the platform bus.
func TestPlace(t *testing.T) {
	root := t.TempDir()
	fn := "sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0"
	for _, d := range []string{fn + "/usb1/1-1/1-1:1.0/ttyUSB0/tty/ttyUSB0", "sys/devices/platform/serial8250/tty/ttyS0", "sys/class/tty"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, fn, "numa_node"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"ttyUSB0": "../../devices/pci0000:80/0000:80:01.0/0000:81:00.0/usb1/1-1/1-1:1.0/ttyUSB0/tty/ttyUSB0",
		"ttyS0":   "/sys/devices/platform/serial8250/tty/ttyS0", // absolute: resolved under the root
	} {
		if err := os.Symlink(target, filepath.Join(root, "sys/class/tty", name)); err != nil {
			t.Fatal(err)
		}
	}
	h := NewHost(root)
	usb, err := h.ClassDevice("tty", "ttyUSB0")
	if err != nil || usb != "/"+fn+"/usb1/1-1/1-1:1.0/ttyUSB0/tty/ttyUSB0" {
		t.Fatalf("ClassDevice = %q, %v", usb, err)
	}
	numa, p := h.Place(usb)
	if numa != 1 || p.Root != "pci0000:80" || !reflect.DeepEqual(p.Path, []string{"0000:80:01.0", "0000:81:00.0"}) {
		t.Fatalf("Place(%q) = %d, %+v", usb, numa, p)
	}
	serial, err := h.ClassDevice("tty", "ttyS0")
	if err != nil || serial != "/sys/devices/platform/serial8250/tty/ttyS0" {
		t.Fatalf("ClassDevice = %q, %v", serial, err)
	}
	if numa, p := h.Place(serial); numa != -1 || p.Root != "" {
		t.Fatalf("Place(%q) = %d, %+v", serial, numa, p)
	}
	if _, err := h.ClassDevice("tty", "ttyX"); err == nil {
		t.Fatal("ClassDevice of a missing entry: no error")
	}
}

func FuzzParseRow(f *testing.F) {
	f.Add("10 16 22 28", 4)
	f.Fuzz(func(t *testing.T, s string, want int) {
		row, err := parseRow(s, want)
		if err != nil {
			return
		}
		if len(row) != want {
			t.Fatalf("%q: %d distances, want %d", s, len(row), want)
		}
		for _, d := range row {
			if d < 1 || d > 255 {
				t.Fatalf("%q: distance %d", s, d)
			}
		}
	})
}
