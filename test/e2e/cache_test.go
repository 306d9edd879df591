package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/test/fixture"
)

// The drm plugin keeps a discovery cache in its state directory
// (docs/performance.md#discovery-cache). These tests change the host the
// way the kernel does after the cache was written and check that INFO,
// ADD and DEVICES see the change. Every sysfs directory keeps its
// modification time through each change, as kernfs does, so nothing here
// can pass by watching sysfs directory times.

// fourGPUs are cards 0-3 on two NUMA nodes, all one vendor.
func fourGPUs() fixture.Host {
	var h fixture.Host
	for i := range 4 {
		h.GPUs = append(h.GPUs, gpuAt(fmt.Sprintf("0000:%02x:00.0", 0x10+i), "0x10de", i/2, i))
	}
	return h
}

// cacheNode is a node whose sysfs directory times are frozen, with the
// drm cache written by a first INFO.
type cacheNode struct {
	*node
	h       fixture.Host
	restore func() error
}

func newCacheNode(t *testing.T, h fixture.Host) *cacheNode {
	t.Helper()
	n := &cacheNode{node: newNode(t, h), h: h}
	var err error
	if n.restore, err = fixture.FreezeDirTimes(filepath.Join(n.root, "sys")); err != nil {
		t.Fatal(err)
	}
	// The state directory exists, as after the node's first ADD: INFO
	// does not create it.
	if err := os.MkdirAll(n.state, 0o700); err != nil {
		t.Fatal(err)
	}
	// The host booted a while ago: /dev/dri's time is not so recent that
	// the cache must distrust it.
	long := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(n.root, "dev/dri"), long, long); err != nil {
		t.Fatal(err)
	}
	if got := n.info(`{}`); got != len(h.GPUs) {
		t.Fatalf("first INFO = %d", got)
	}
	if _, err := os.Stat(filepath.Join(n.state, "drm.cache")); err != nil {
		t.Fatalf("INFO wrote no cache: %v", err)
	}
	// DEVICES caches every fact ADD needs too (INFO leaves out the PCI
	// ids and NUMA nodes).
	n.devices()
	return n
}

// devices returns the first node DEVICES lists for each key.
func (n *cacheNode) devices() map[string]string {
	n.t.Helper()
	r := n.run("drm", drmConf(`{}`), "CDI_COMMAND=DEVICES")
	out := map[string]string{}
	for _, d := range r.obj(n.t)["devices"].([]any) {
		dev := d.(map[string]any)
		nodes := dev["nodes"].([]any)
		out[dev["key"].(string)] = strings.TrimPrefix(nodes[0].(string), "/dev/dri/")
	}
	return out
}

// change runs a change of the host and puts the sysfs directory times
// back.
func (n *cacheNode) change(f func() error) {
	n.t.Helper()
	if err := f(); err != nil {
		n.t.Fatal(err)
	}
	if err := n.restore(); err != nil {
		n.t.Fatal(err)
	}
}

func (n *cacheNode) info(args string) int {
	n.t.Helper()
	r := n.run("drm", drmConf(args), "CDI_COMMAND=INFO")
	got, ok := r.obj(n.t)["gpu"].(float64)
	if !ok || r.status != 0 {
		n.t.Fatalf("INFO: %s %s", r.stdout, r.stderr)
	}
	return int(got)
}

// add allocates count GPUs under id and returns the nodes answered.
func (n *cacheNode) add(id string, count int) []string {
	n.t.Helper()
	r := n.run("drm", drmConf(`{}`), "CDI_COMMAND=ADD", fmt.Sprintf("CDI_REQUEST=gpu:%d", count), "CDI_REQUEST_ID="+id)
	if r.status != 0 {
		n.t.Fatalf("ADD %s: %s %s", id, r.stdout, r.stderr)
	}
	return r.devices(n.t)
}

// TestCacheStaleness: each way the GPUs of a host change is seen by the
// next INFO and ADD, whichever signal carries it.
func TestCacheStaleness(t *testing.T) {
	vfHost := fourGPUs()
	vfHost.GPUs[3].TotalVFs = 2
	tests := []struct {
		name   string
		host   fixture.Host
		change func(n *cacheNode) error
		info   int               // INFO after the change
		args   string            // config of the ADD after it
		add    string            // what an ADD of every usable GPU hands out
		first  map[string]string // DEVICES after it: a device's first node, where it matters
	}{
		{"hot-unplug", fourGPUs(), func(n *cacheNode) error { return fixture.Unplug(n.root, n.h.GPUs[1]) },
			3, `{}`, "card0 renderD128 card2 renderD130 card3 renderD131", nil},
		{"hot-plug", fourGPUs(), func(n *cacheNode) error {
			return fixture.Plug(n.root, gpuAt("0000:20:00.0", "0x10de", 1, 4))
		}, 5, `{}`, "card0 renderD128 card1 renderD129 card2 renderD130 card3 renderD131 card4 renderD132", nil},
		{"driver rebind to vfio-pci", fourGPUs(), func(n *cacheNode) error { return fixture.Unbind(n.root, n.h.GPUs[0], "vfio-pci") },
			3, `{}`, "card1 renderD129 card2 renderD130 card3 renderD131", nil},
		{"driver rebind, new minors", fourGPUs(), func(n *cacheNode) error {
			g := n.h.GPUs[2]
			if err := fixture.Unbind(n.root, g, ""); err != nil {
				return err
			}
			g.Card, g.Render = 7, 135
			return fixture.Plug(n.root, g)
		}, 4, `{}`, "card0 renderD128 card1 renderD129 card3 renderD131 card7 renderD135", map[string]string{"0000:12:00.0": "card7"}},
		{"VF creation", vfHost, func(n *cacheNode) error {
			k, err := fixture.StartKernel(n.root, n.h)
			if err != nil {
				return err
			}
			defer k.Stop()
			return writeAndWait(n.root, n.h.GPUs[3].Addr, "2")
		}, 3, `{}`, "card0 renderD128 card1 renderD129 card2 renderD130", nil},
		{"renumbering", fourGPUs(), func(n *cacheNode) error {
			a, b := n.h.GPUs[0], n.h.GPUs[3]
			for _, g := range []fixture.GPU{a, b} {
				if err := fixture.Unplug(n.root, g); err != nil {
					return err
				}
			}
			a.Card, a.Render, b.Card, b.Render = b.Card, b.Render, a.Card, a.Render
			for _, g := range []fixture.GPU{a, b} {
				if err := fixture.Plug(n.root, g); err != nil {
					return err
				}
			}
			return nil
		}, 4, `{"pci_addresses":["0000:10:00.0"]}`, "card3 renderD131", map[string]string{"0000:10:00.0": "card3", "0000:13:00.0": "card0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newCacheNode(t, tt.host)
			n.change(func() error { return tt.change(n) })
			if got := n.info(`{}`); got != tt.info {
				t.Errorf("INFO after the change = %d, want %d", got, tt.info)
			}
			if tt.first != nil {
				got := n.devices()
				for k, want := range tt.first {
					if got[k] != want {
						t.Errorf("DEVICES after the change: %s has %s first, want %s", k, got[k], want)
					}
				}
			}
			count := tt.info
			if tt.args != `{}` {
				count = 1
			}
			r := n.run("drm", drmConf(tt.args), "CDI_COMMAND=ADD", fmt.Sprintf("CDI_REQUEST=gpu:%d", count), "CDI_REQUEST_ID=all")
			if r.status != 0 {
				t.Fatalf("ADD after the change: %s", r.stdout)
			}
			got := strings.ReplaceAll(strings.Join(r.devices(t), " "), "/dev/dri/", "")
			if got != tt.add {
				t.Errorf("ADD after the change = %q, want %q (%s)", got, tt.add, r.stderr)
			}
			if r := n.run("drm", drmConf(`{}`), "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=more"); count == tt.info && r.code(t) != 103 {
				t.Errorf("ADD beyond the GPUs present: %s", r.stdout)
			}
		})
	}
}

// writeAndWait writes a PF's sriov_numvfs and waits for the simulated
// kernel to make the VFs' links, as the sriov plugin does.
func writeAndWait(root, pf, n string) error {
	dir := filepath.Join(root, "sys/bus/pci/devices", pf)
	if err := os.WriteFile(filepath.Join(dir, "sriov_numvfs"), []byte(n+"\n"), 0o644); err != nil {
		return err
	}
	last := filepath.Join(dir, "virtfn"+string(rune(n[0]-1)))
	for range 2000 {
		if _, err := os.Lstat(last); err == nil {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("no VFs of %s", pf)
}

// TestCacheDevChange: a /dev node that goes without a uevent (removed by
// hand) is seen through the devtmpfs directory's time, with the sequence
// number where it was.
func TestCacheDevChange(t *testing.T) {
	n := newCacheNode(t, fourGPUs())
	seq := readFile(t, filepath.Join(n.root, "sys/kernel/uevent_seqnum"))
	n.change(func() error {
		for _, p := range []string{"dev/dri/card1", "dev/dri/renderD129"} {
			if err := os.Remove(filepath.Join(n.root, p)); err != nil {
				return err
			}
		}
		return nil
	})
	if got := n.info(`{}`); got != 3 {
		t.Errorf("INFO = %d, want 3", got)
	}
	if d := n.add("a", 3); slices.Contains(d, "/dev/dri/card1") {
		t.Errorf("ADD handed out a node that is gone: %v", d)
	}
	if again := readFile(t, filepath.Join(n.root, "sys/kernel/uevent_seqnum")); again != seq {
		t.Fatalf("the sequence number moved: %s → %s", seq, again)
	}
}

// TestCacheLiveCheck: a change that no signal carried (two GPUs swap
// their DRM minors, with no uevent and /dev as it was) is caught by ADD's
// live check of the devices it chose: it rescans and chooses again.
func TestCacheLiveCheck(t *testing.T) {
	n := newCacheNode(t, fourGPUs())
	n.change(func() error { return swapMinors(n.root, n.h.GPUs[0], n.h.GPUs[1]) })
	r := n.run("drm", drmConf(`{"pci_addresses":["0000:10:00.0"]}`), "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=a")
	if d := r.devices(t); strings.Join(d, " ") != "/dev/dri/card1 /dev/dri/renderD129" {
		t.Fatalf("ADD handed out %v, want 0000:10:00.0's nodes as they are now (%s)", d, r.stderr)
	}
	if rec := n.records("drm")["a"]; rec == nil || rec.Devices()[0].Key != "0000:10:00.0" {
		t.Fatalf("record: %+v", rec)
	}
	if !strings.Contains(r.stderr, "not handing out 0000:10:00.0") {
		t.Errorf("the live check did not say what it found: %q", r.stderr)
	}
	// The rescan rewrote the cache: DEVICES now sees the host as it is.
	r = n.run("drm", drmConf(`{}`), "CDI_COMMAND=DEVICES")
	for _, d := range r.obj(t)["devices"].([]any) {
		dev := d.(map[string]any)
		if dev["key"] == "0000:11:00.0" && fmt.Sprint(dev["nodes"]) != "[/dev/dri/card0 /dev/dri/renderD128]" {
			t.Errorf("DEVICES after the rescan: %v", dev)
		}
	}
}

// swapMinors gives two GPUs each other's DRM minors in sysfs only: the
// class links (made anew, as kernfs would) and the minor directories. The
// /dev nodes stay, as their names and numbers do.
func swapMinors(root string, a, b fixture.GPU) error {
	pci := func(g fixture.GPU) string {
		return filepath.Join(root, "sys/devices", "pci"+g.Addr[:7], g.Addr)
	}
	names := func(g fixture.GPU) []string {
		return []string{fmt.Sprintf("card%d", g.Card), fmt.Sprintf("renderD%d", g.Render)}
	}
	tmp := filepath.Join(root, ".swap")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	for _, x := range [][2]fixture.GPU{{a, b}, {b, a}} {
		for _, name := range names(x[0]) {
			if err := os.Rename(filepath.Join(pci(x[0]), "drm", name), filepath.Join(tmp, name)); err != nil {
				return err
			}
		}
	}
	for _, x := range [][2]fixture.GPU{{a, b}, {b, a}} {
		for _, name := range names(x[0]) {
			if err := os.Rename(filepath.Join(tmp, name), filepath.Join(pci(x[1]), "drm", name)); err != nil {
				return err
			}
			link := filepath.Join(root, "sys/class/drm", name)
			target, err := filepath.Rel(filepath.Dir(link), filepath.Join(pci(x[1]), "drm", name))
			if err != nil {
				return err
			}
			if err := os.Symlink(target, link+".new"); err != nil {
				return err
			}
			if err := os.Rename(link+".new", link); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestCacheWithoutSeqnum: a host without uevent_seqnum compares listings
// every time, and still sees each change.
func TestCacheWithoutSeqnum(t *testing.T) {
	n := newNode(t, fourGPUs())
	if err := os.Remove(filepath.Join(n.root, "sys/kernel/uevent_seqnum")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(n.state, 0o700); err != nil {
		t.Fatal(err)
	}
	c := &cacheNode{node: n, h: fourGPUs(), restore: func() error { return nil }}
	if got := c.info(`{}`); got != 4 {
		t.Fatal(got)
	}
	for i, change := range []func() error{
		func() error { return fixture.Unplug(n.root, c.h.GPUs[2]) },
		func() error { return fixture.Plug(n.root, c.h.GPUs[2]) },
		func() error { return fixture.Unbind(n.root, c.h.GPUs[0], "vfio-pci") },
	} {
		c.change(change)
		if got, want := c.info(`{}`), []int{3, 4, 3}[i]; got != want {
			t.Errorf("change %d: INFO = %d, want %d", i, got, want)
		}
	}
}

// TestCacheFile: the cache is a 0600 file of its own beside the store; a
// damaged one is rebuilt, never trusted; a host without a boot id is
// never cached.
//
// The last GPU loses its /dev nodes in a way no stamp shows (/dev/dri
// keeps its time), so the good cache, still trusted, claims four usable
// GPUs where the host has three: a damaged copy of it that was trusted
// would claim four too, and one that was rebuilt says three.
func TestCacheFile(t *testing.T) {
	n := newCacheNode(t, fourGPUs())
	path := filepath.Join(n.state, "drm.cache")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v %v", fi, err)
	}
	good := readFile(t, path)
	hidden := n.h.GPUs[3]
	dri := filepath.Join(n.root, "dev/dri")
	before, err := os.Stat(dri)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{fmt.Sprintf("card%d", hidden.Card), fmt.Sprintf("renderD%d", hidden.Render)} {
		if err := os.Remove(filepath.Join(dri, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(dri, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	// fresh and freshInfo are the files a scan of the host as it is now
	// writes, for DEVICES (every fact) and INFO (fewer).
	devices := func() { n.run("drm", drmConf(`{}`), "CDI_COMMAND=DEVICES") }
	writeCache := func(content string) {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rebuilt := func(run func()) string {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		run()
		return readFile(t, path)
	}
	fresh, freshInfo := rebuilt(devices), rebuilt(func() { n.info(`{}`) })
	writeCache(good)
	if got := n.info(`{}`); got != 4 || fresh == good {
		t.Fatalf("the good cache was not trusted (INFO = %d): nothing here could tell a trusted file from a rebuilt one", got)
	}
	if devices(); readFile(t, path) != good {
		t.Fatal("DEVICES rewrote the good cache: nothing here could tell a trusted file from a rebuilt one")
	}
	flip := func(i int) string { b := []byte(good); b[i] ^= 0xff; return string(b) }
	// replace changes what the file says without breaking its shape:
	// only the checksums can tell.
	replace := func(old, new string) string {
		t.Helper()
		if strings.Count(good, old) == 0 {
			t.Fatalf("the cache does not hold %q", old)
		}
		return strings.ReplaceAll(good, old, new)
	}
	// The head's count of GPUs with a primary and a render node (the
	// summary: eight varints, one per set of node kinds) says 9, not 4.
	const four = "\b\x00\x00\x00\x04\x00\x00\x00\x00"
	for _, tt := range []struct {
		name string
		bad  string
		info bool // INFO reads the damaged part; it reads only the head, whose own checksum covers the count
	}{
		{"empty", "", true},
		{"truncated", good[:len(good)/2], true},
		{"head flipped", flip(24), true},
		{"body flipped", flip(len(good) - 3), false},
		{"head: count changed", replace(four, "\b\x00\x00\x00\x09\x00\x00\x00\x00"), true},
		{"body: vendor changed", replace("\x060x10de", "\x060x10df"), false},
		{"garbage", strings.Repeat("x", 300), true},
	} {
		writeCache(tt.bad)
		if devices(); readFile(t, path) != fresh {
			t.Errorf("%s cache: DEVICES did not rebuild it from the host", tt.name)
		}
		if !tt.info {
			continue
		}
		writeCache(tt.bad)
		if got := n.info(`{}`); got != 3 || readFile(t, path) != freshInfo {
			t.Errorf("%s cache: INFO = %d, want 3 from a cache rebuilt from the host", tt.name, got)
		}
	}
	if err := os.Remove(filepath.Join(n.root, "proc/sys/kernel/random/boot_id")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if got := n.info(`{}`); got != 3 {
		t.Errorf("INFO without a boot id = %d, want 3", got)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a host without a boot id was cached: %v", err)
	}
}

// TestCacheSharedByConfigs: configs that filter differently (the sriov
// plugin's delegate names one VF set per call) share the one cache file.
func TestCacheSharedByConfigs(t *testing.T) {
	n := newCacheNode(t, fourGPUs())
	for i, g := range n.h.GPUs {
		if got := n.info(fmt.Sprintf(`{"pci_addresses":[%q]}`, g.Addr)); got != 1 {
			t.Errorf("%d: INFO = %d", i, got)
		}
	}
	if got := n.info(`{"vendorid_whitelist":["0x1002"]}`); got != 0 {
		t.Errorf("other vendor: INFO = %d", got)
	}
	files, err := filepath.Glob(filepath.Join(n.state, "*.cache*"))
	if err != nil || len(files) != 1 || filepath.Base(files[0]) != "drm.cache" {
		t.Errorf("cache files: %v %v", files, err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
