package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/test/fixture"
)

// renumberHost has two GPUs, A at 0000:10:00.0 and B at 0000:11:00.0,
// with the compute nodes of their vendor. After a reboot (rebooted) they
// came up the other way round: A has card1 and renderD129 (and, on
// NVIDIA, /dev/nvidia1), B card0 and renderD128, and the vendor's
// dynamic major is another.
func renumberHost(nvidia, rebooted bool) fixture.Host {
	gpu := func(addr string, i int) fixture.GPU {
		g := fixture.GPU{Addr: addr, Vendor: "0x1002", Device: "0x74a1", NUMA: fixture.Int(0), Driver: "amdgpu", Card: i, Render: 128 + i, Control: -1}
		if nvidia {
			g.Vendor, g.Device, g.Driver, g.NVIDIAMinor = "0x10de", "0x2330", "nvidia", fixture.Int(i)
		}
		return g
	}
	h := fixture.Host{GPUs: []fixture.GPU{gpu("0000:10:00.0", 0), gpu("0000:11:00.0", 1)}, KFD: !nvidia, NVIDIA: nvidia}
	if rebooted {
		h.GPUs = []fixture.GPU{gpu("0000:10:00.0", 1), gpu("0000:11:00.0", 0)}
		h.Majors = map[string]int{"kfd": 511, "nvidia-uvm": 506}
	}
	return h
}

// reboot lays the host out anew as h, with a fresh boot id, in place of
// the old tree, and empties the spec directory as a reboot empties its
// tmpfs.
func reboot(t *testing.T, n *node, h fixture.Host, specDir string) {
	t.Helper()
	next := n.root + ".boot"
	if err := os.MkdirAll(next, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := h.Build(next); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(n.root, n.root+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, n.root); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{n.root + ".old", specDir} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
}

// specNode is a device node of a spec file.
type specNode struct {
	Path         string
	Major, Minor int64
}

// requestNodes reads the nodes of the request's own entry in its one
// spec file.
func requestNodes(t *testing.T, dir, kind, id string) []specNode {
	t.Helper()
	_, b := onlyFile(t, dir, kind, id)
	var spec struct {
		Devices []struct {
			Name           string
			ContainerEdits struct{ DeviceNodes []specNode }
		}
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	for _, d := range spec.Devices {
		if d.Name == id {
			return d.ContainerEdits.DeviceNodes
		}
	}
	t.Fatalf("no entry %s in %s", id, b)
	return nil
}

// hostNodes are the nodes at paths on the host as they are now, with the
// numbers of the device files (0:0 where the fixture could make no
// others).
func hostNodes(t *testing.T, root string, paths ...string) []specNode {
	t.Helper()
	var out []specNode
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(root, p), &st); err != nil {
			t.Fatal(err)
		}
		out = append(out, specNode{p, int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))})
	}
	return out
}

// Devices renumbered across a reboot (AMD driver issue #86): each
// allocation keeps its GPU by PCI address, and the spec written back
// after the reboot names that GPU's new nodes, paths and numbers, and
// the compute node's new major; the replay answers the new paths too.
func TestRenumberedAcrossReboot(t *testing.T) {
	for _, nvidia := range []bool{false, true} {
		t.Run(map[bool]string{false: "amd", true: "nvidia"}[nvidia], func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cdi")
			conf := withSpec(t, drmConf(`{"want_device_nodes":["primary","render"]}`), "example.com/gpu", dir)
			n := newCtlNode(t, renumberHost(nvidia, false), map[string]string{"gpu.d/drm.conf": conf})
			companion := func(card int) []string {
				if nvidia {
					return []string{fmt.Sprintf("/dev/nvidia%d", card), "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}
				}
				return []string{"/dev/kfd"}
			}
			nodesOf := func(card int) []string {
				return append([]string{fmt.Sprintf("/dev/dri/card%d", card), fmt.Sprintf("/dev/dri/renderD%d", 128+card)}, companion(card)...)
			}
			add := func(id, key string) result {
				return n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID="+id, "CDI_REQUEST_DEVICES="+key)
			}
			alloc := map[string]string{"x": "0000:10:00.0", "y": "0000:11:00.0"}
			before := map[string]int{"x": 0, "y": 1}
			after := map[string]int{"x": 1, "y": 0}
			for _, id := range []string{"x", "y"} {
				r := add(id, alloc[id])
				if r.status != 0 || !slices.Equal(r.devices(t), nodesOf(before[id])) {
					t.Fatalf("ADD %s: %s%s, want %v", id, r.stdout, r.stderr, nodesOf(before[id]))
				}
				if got, want := requestNodes(t, dir, "example.com/gpu", id), hostNodes(t, n.root, nodesOf(before[id])...); !slices.Equal(got, want) {
					t.Fatalf("spec of %s before the reboot: %v, want %v", id, got, want)
				}
			}
			dynamic := map[bool]string{false: "/dev/kfd", true: "/dev/nvidia-uvm"}[nvidia]
			old := hostNodes(t, n.root, dynamic)[0]

			reboot(t, n.node, renumberHost(nvidia, true), dir)
			r := n.ctl("specs", "--restore", "-o", "json")
			if r.status != 0 {
				t.Fatalf("specs --restore: %s%s", r.stdout, r.stderr)
			}
			for _, id := range []string{"x", "y"} {
				want := hostNodes(t, n.root, nodesOf(after[id])...)
				if got := requestNodes(t, dir, "example.com/gpu", id); !slices.Equal(got, want) {
					t.Errorf("spec of %s after the reboot: %v, want %v", id, got, want)
				}
				if keys := n.records("drm")[id].Devices(); len(keys) != 1 || keys[0].Key != alloc[id] {
					t.Errorf("%s holds %v after the reboot, want %s", id, keys, alloc[id])
				}
				// A replay, as a Kubernetes mode's restore, answers the same.
				if r := add(id, alloc[id]); r.status != 0 || !slices.Equal(r.devices(t), nodesOf(after[id])) {
					t.Errorf("replay of %s: %s%s, want %v", id, r.stdout, r.stderr, nodesOf(after[id]))
				}
			}
			// Where the fixture makes real numbers, the major did change.
			if now := hostNodes(t, n.root, dynamic)[0]; old.Major != 0 && now.Major == old.Major {
				t.Errorf("the reboot kept %s at major %d", dynamic, old.Major)
			}
		})
	}
}
