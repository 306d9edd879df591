package sysfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestIndex(t *testing.T) {
	tests := []struct {
		name, prefix string
		want         int
		ok           bool
	}{
		{"tty13", "tty", 13, true},
		{"tty0", "tty", 0, true},
		{"ttyS0", "tty", 0, false},
		{"ttyUSB10", "ttyUSB", 10, true},
		{"tty", "tty", 0, false},
		{"tty01", "tty", 0, false},
		{"card0-DP-1", "card", 0, false},
		{"renderD128", "renderD", 128, true},
		{"tty1234567890", "tty", 0, false},
	}
	for _, tt := range tests {
		got, ok := Index(tt.name, tt.prefix)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Index(%q, %q) = %d, %v", tt.name, tt.prefix, got, ok)
		}
	}
}

func TestParseUevent(t *testing.T) {
	tests := []struct {
		in   string
		want Uevent
		ok   bool
	}{
		{"MAJOR=226\nMINOR=0\nDEVNAME=dri/card0\nDEVTYPE=drm_minor\n", Uevent{"dri/card0", "226:0"}, true},
		{"DEVNAME=tty13", Uevent{DevName: "tty13"}, true},
		{"MAJOR=4\n", Uevent{}, true},
		{"MAJOR=4\nMINOR=64", Uevent{Dev: "4:64"}, true},
		{"MAJOR=4\nMINOR=x\n", Uevent{}, true},
		{"MAJOR=04\nMINOR=1\n", Uevent{}, true},
		{"MAJOR=-4\nMINOR=1\n", Uevent{}, true},
		{"DEVNAME=ttyS0\nDEVNAME=ttyS1\n", Uevent{DevName: "ttyS0"}, true},
		{"DEVNAME=/etc/passwd\n", Uevent{}, false},
		{"DEVNAME=../etc\n", Uevent{}, false},
		{"DEVNAME=dri/../../x\n", Uevent{}, false},
		{"DEVNAME=\n", Uevent{}, false},
	}
	for _, tt := range tests {
		got, err := parseUevent([]byte(tt.in))
		if (err == nil) != tt.ok || (err == nil && got != tt.want) {
			t.Errorf("parseUevent(%q) = %+v, %v", tt.in, got, err)
		}
	}
}

func FuzzParseUevent(f *testing.F) {
	f.Add("MAJOR=226\nMINOR=0\nDEVNAME=dri/card0\n")
	f.Add("DEVNAME=../x")
	f.Fuzz(func(t *testing.T, in string) {
		u, err := parseUevent([]byte(in))
		if err != nil {
			return
		}
		maj, min, ok := strings.Cut(u.Dev, ":")
		_, okMaj := Index(maj, "")
		_, okMin := Index(min, "")
		if u.Dev != "" && (!ok || !okMaj || !okMin) {
			t.Fatalf("device number %q from %q", u.Dev, in)
		}
		name := u.DevName
		if name == "" {
			return
		}
		if strings.HasPrefix(name, "/") || strings.Contains("/"+name+"/", "/../") || filepath.Clean(name) != name {
			t.Fatalf("unsafe DEVNAME accepted: %q", name)
		}
	})
}

func FuzzIndex(f *testing.F) {
	f.Add("tty13", "tty")
	f.Fuzz(func(t *testing.T, name, prefix string) {
		n, ok := Index(name, prefix)
		if ok && (n < 0 || prefix+itoa(n) != name) {
			t.Fatalf("Index(%q, %q) = %d", name, prefix, n)
		}
	})
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// The /dev listing counts only character devices and is cached per Host.
func TestNodeExists(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"dev/dri/by-path", "dev/tty5"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mkchar(t, filepath.Join(root, "dev/dri/card0"), 226, 0)
	if err := os.WriteFile(filepath.Join(root, "dev/dri/card1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("card9", filepath.Join(root, "dev/dri/card2")); err != nil {
		t.Fatal(err)
	}
	h := NewHost(root)
	for name, want := range map[string]bool{"dri/card0": true, "dri/card1": false, "dri/card2": false,
		"dri/by-path": false, "tty5": false, "dri/card3": false, "nope/x": false} {
		if h.NodeExists(name) != want {
			t.Errorf("NodeExists(%q) != %v", name, want)
		}
	}
}

// A node is handed out only when it is a character device with the
// numbers sysfs gives; ResolveNode prefers a good DEVNAME node, falls back
// to the conventional name, and fails when neither is good.
func TestCheckNode(t *testing.T) {
	root := t.TempDir()
	maj, min := mkchar(t, filepath.Join(root, "dev/tty13"), 4, 13)
	mkchar(t, filepath.Join(root, "dev/console-alias"), 4, 13)
	mkchar(t, filepath.Join(root, "dev/tty14"), 4, 99) // numbers planted wrong
	writeTree(t, root, map[string]string{
		"sys/class/tty/tty13/dev":    fmt.Sprintf("%d:%d\n", maj, min),
		"sys/class/tty/tty13/uevent": "DEVNAME=console-alias\n",
		"sys/class/tty/tty14/dev":    fmt.Sprintf("%d:%d\n", maj, min+1),
		"sys/class/tty/tty15/dev":    "4:15\n",
		"sys/class/tty/tty16/dev":    "4:16\n",
		"dev/tty16":                  "a regular file",
	})
	if err := os.Symlink("tty13", filepath.Join(root, "dev/tty15")); err != nil { // a link, even to a good node
		t.Fatal(err)
	}
	h := NewHost(root)
	for _, tt := range []struct {
		tty  string
		want string // resolved node, or "" for an error
	}{{"tty13", "/dev/console-alias"}, {"tty14", ""}, {"tty15", ""}, {"tty16", ""}, {"tty17", ""}} {
		got, err := resolveTTY(h, tt.tty)
		if got != tt.want || (err == nil) != (tt.want != "") {
			t.Errorf("%s: %q %v, want %q", tt.tty, got, err, tt.want)
		}
	}
	if maj == 0 {
		return // only 0:0 devices can be made here: every node has the same numbers
	}
	if err := os.WriteFile(filepath.Join(root, "sys/class/tty/tty13/uevent"), []byte("DEVNAME=tty14\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := resolveTTY(NewHost(root), "tty13"); got != "/dev/tty13" || err != nil {
		t.Errorf("a DEVNAME node with the wrong numbers is used: %q %v", got, err)
	}
	// uevent's MAJOR and MINOR are sysfs's numbers too: with them the dev
	// attribute is not needed, and a node that differs from them is refused.
	mkchar(t, filepath.Join(root, "dev/tty18"), 4, 18)
	mkchar(t, filepath.Join(root, "dev/tty19"), 4, 19)
	writeTree(t, root, map[string]string{
		"sys/class/tty/tty18/uevent": "MAJOR=4\nMINOR=18\nDEVNAME=tty18\n", // no dev attribute
		"sys/class/tty/tty19/uevent": "MAJOR=4\nMINOR=91\nDEVNAME=tty19\n",
		"sys/class/tty/tty19/dev":    "4:19\n",
	})
	h = NewHost(root)
	if got, err := resolveTTY(h, "tty18"); got != "/dev/tty18" || err != nil {
		t.Errorf("tty18, numbers from uevent only: %q %v", got, err)
	}
	if got, err := resolveTTY(h, "tty19"); err == nil {
		t.Errorf("tty19, a node unlike uevent's numbers, is handed out: %q", got)
	}
}

// resolveTTY resolves a tty's node through its class entry, as the
// character-device engine's live check does.
func resolveTTY(h *Host, name string) (string, error) {
	return h.ResolveNode(h.Sys("class", "tty", name), name)
}

// writeTree writes files under root, making their directories.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// mkchar makes a character device. Without CAP_MKNOD only 0:0 can be made
// (a whiteout, Linux 5.8 and later); it returns the numbers it used.
func mkchar(t *testing.T, p string, major, minor uint32) (uint32, uint32) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	err := unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(major, minor)))
	if err == unix.EPERM {
		major, minor = 0, 0
		err = unix.Mknod(p, unix.S_IFCHR|0o600, 0)
	}
	if err != nil {
		t.Skipf("cannot make character devices here: %v", err)
	}
	return major, minor
}

// DRM discovery groups minors by device through the class links, and also
// accepts class entries that are plain directories with a device link.
func TestDRMDevices(t *testing.T) {
	root := t.TempDir()
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	mk("sys/devices/pci0000:00/0000:00:02.0/drm/card1")
	mk("sys/devices/pci0000:00/0000:00:02.0/drm/renderD128")
	mk("sys/devices/pci0000:00/0000:00:03.0")
	mk("sys/class/drm/card0") // a hand-made entry: a directory with a device link
	link("../../../devices/pci0000:00/0000:00:03.0", "sys/class/drm/card0/device")
	link("../../devices/pci0000:00/0000:00:02.0/drm/card1", "sys/class/drm/card1")
	link("../../devices/pci0000:00/0000:00:02.0/drm/renderD128", "sys/class/drm/renderD128")
	link("../../devices/pci0000:00/0000:00:02.0/drm/card1-DP-1", "sys/class/drm/card1-DP-1")
	if err := os.WriteFile(filepath.Join(root, "sys/class/drm/version"), []byte("drm 1.1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	devs, err := NewHost(root).DRMDevices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 {
		t.Fatalf("got %d devices: %+v", len(devs), devs)
	}
	if a, _ := devs[0].PCIAddr(); a != "0000:00:03.0" || len(devs[0].Minors) != 1 {
		t.Errorf("first device: %+v", devs[0])
	}
	if a, _ := devs[1].PCIAddr(); a != "0000:00:02.0" || len(devs[1].Minors) != 2 || devs[1].Minors[1].Kind != Render {
		t.Errorf("second device: %+v", devs[1])
	}
	// Only the wanted kinds are resolved.
	devs, _ = NewHost(root).DRMDevices(Render)
	if len(devs) != 1 || len(devs[0].Minors) != 1 {
		t.Errorf("render only: %+v", devs)
	}
}

// VFsSettled accepts only exactly virtfn0..n-1, each pointing at a device,
// and nothing from virtfn(n) up to sriov_totalvfs: the states a PF passes
// through while the kernel and udev remove and add VFs in any order.
func TestVFsSettled(t *testing.T) {
	tests := []struct {
		name     string
		links    []int // virtfnK pointing at a device
		dangling []int // virtfnK whose device is gone
		n        int
		want     bool
	}{
		{"settled at 2", []int{0, 1}, nil, 2, true},
		{"settled at 0", nil, nil, 0, true},
		{"a gap: virtfn0 not yet created", []int{1, 2}, nil, 2, false},
		{"an old VF lingers beyond n", []int{0, 1, 3}, nil, 2, false},
		{"the last old VF lingers", []int{7}, nil, 0, false},
		{"a link to a removed device", []int{0}, []int{1}, 2, false},
		{"a dangling link beyond n", nil, []int{2}, 0, false},
		{"one missing", []int{0, 1, 2}, nil, 4, false},
	}
	for _, tt := range tests {
		pf := t.TempDir()
		for _, k := range tt.links {
			dev := filepath.Join(pf, "dev"+itoa(k))
			if err := os.Mkdir(dev, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(dev, filepath.Join(pf, "virtfn"+itoa(k))); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range tt.dangling {
			if err := os.Symlink(filepath.Join(pf, "gone"), filepath.Join(pf, "virtfn"+itoa(k))); err != nil {
				t.Fatal(err)
			}
		}
		d, err := OpenDir(pf)
		if err != nil {
			t.Fatal(err)
		}
		if got := VFsSettled(d, tt.n, 8); got != tt.want {
			t.Errorf("%s: VFsSettled(%d) = %v, want %v", tt.name, tt.n, got, tt.want)
		}
		d.Close()
	}
}

// deviceOf resolves the class links of the kernel's shape lexically and
// agrees with filepath on every link it accepts.
func TestDeviceOf(t *testing.T) {
	tests := []struct {
		class, target, want string
	}{
		{"/sys/class/drm", "../../devices/pci0000:00/0000:00:02.0/drm/card0", "/sys/devices/pci0000:00/0000:00:02.0"},
		{"/r/sys/class/drm", "../../devices/platform/simple-framebuffer.0/drm/card1", "/r/sys/devices/platform/simple-framebuffer.0"},
		{"/sys/class/drm", "../../devices/pci0000:00/0000:00:02.0/card0", ""}, // no drm directory
		{"/sys/class/drm", "/sys/devices/x/drm/card0", ""},                    // absolute
		{"/sys/class/drm", "../../devices/a/../b/drm/card0", ""},              // not clean
		{"/sys/class/drm", "../../devices/a//b/drm/card0", ""},
		{"/sys/class/drm", "../../../../../drm/card0", ""}, // above the root
		{"/sys/class/drm", "card0", ""},
	}
	for _, tt := range tests {
		got, ok := deviceOf(tt.class, tt.target)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("deviceOf(%q, %q) = %q, %v; want %q", tt.class, tt.target, got, ok, tt.want)
		}
	}
}

// FuzzDeviceOf: whatever deviceOf accepts, filepath resolves the same way.
func FuzzDeviceOf(f *testing.F) {
	f.Add("/sys/class/drm", "../../devices/pci0000:00/0000:00:02.0/drm/card0")
	f.Add("/r/sys/class/drm", "../x/drm/y")
	f.Fuzz(func(t *testing.T, class, target string) {
		if !filepath.IsAbs(class) || filepath.Clean(class) != class {
			return
		}
		got, ok := deviceOf(class, target)
		if !ok {
			return
		}
		want := filepath.Dir(filepath.Dir(filepath.Join(class, target)))
		if got != want || filepath.Base(filepath.Dir(filepath.Join(class, target))) != "drm" {
			t.Fatalf("deviceOf(%q, %q) = %q; filepath says %q", class, target, got, want)
		}
	})
}

// readlinkat reads links of any length up to PATH_MAX.
func TestReadlinkat(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{1, 255, 256, 257, 511, 512, 1000, 4000} {
		target := strings.Repeat("x", n)
		link := filepath.Join(dir, fmt.Sprint(n))
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if got, err := readlinkat(unix.AT_FDCWD, link); got != target || err != nil {
			t.Errorf("%d bytes: got %d bytes, %v", n, len(got), err)
		}
	}
}

// VFAddr follows the kernel's routing-ID arithmetic: offset and stride
// from the PF, carrying into the device number and the bus.
func TestVFAddr(t *testing.T) {
	for _, tt := range []struct {
		pf             string
		offset, stride string
		k              int
		want           string
	}{
		{"0000:03:00.0", "1", "1", 0, "0000:03:00.1"},
		{"0000:03:00.0", "1", "1", 7, "0000:03:01.0"},
		{"0000:3b:00.0", "128", "2", 1, "0000:3b:10.2"}, // an X710's VFs
		{"0000:3b:00.1", "127", "2", 0, "0000:3b:10.0"},
		{"0000:3b:00.0", "256", "1", 0, "0000:3c:00.0"}, // on the next bus
	} {
		dir := t.TempDir()
		for name, v := range map[string]string{"sriov_offset": tt.offset + "\n", "sriov_stride": tt.stride + "\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		d, err := OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		got, err := VFAddr(d, tt.pf, tt.k)
		d.Close()
		if err != nil || got != tt.want {
			t.Errorf("VFAddr(%s offset %s stride %s, %d) = %q, %v; want %s", tt.pf, tt.offset, tt.stride, tt.k, got, err, tt.want)
		}
	}
	d, err := OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := VFAddr(d, "0000:03:00.0", 0); err == nil {
		t.Error("a PF without sriov_offset gave an address")
	}
}
