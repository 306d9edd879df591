package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// cdictl names what a plugin serving several types holds by the record:
// each allocation's own type, its delegate, its share count (issue 45),
// never by the config that happened to run first.

// genericTypesNode is the generic-devices host with the example configs
// of the three types the generic plugin serves from one store.
func genericTypesNode(t *testing.T) *ctlNode {
	t.Helper()
	confs := map[string]string{}
	for _, rel := range []string{"kvm.d/generic-kvm.conf", "fuse.d/generic-fuse.conf", "tun.d/generic-tun.conf"} {
		b, err := os.ReadFile(filepath.Join("../../conf/examples", rel))
		if err != nil {
			t.Fatal(err)
		}
		confs[rel] = string(b)
	}
	return newCtlNode(t, fixture.GenericDevices(), confs)
}

// lsTypes returns "requestId plugin spec type delegateOf" for every
// allocation ls lists.
func (n *ctlNode) lsTypes() []string {
	n.t.Helper()
	r := n.ctl("ls", "-o", "json")
	var out lsOut
	r.json(n.t, &out)
	if r.status != 0 {
		n.t.Fatalf("ls: %d %s %s", r.status, r.stdout, r.stderr)
	}
	var rows []string
	for _, a := range out.Allocations {
		rows = append(rows, strings.Join([]string{a.RequestID, a.Plugin, a.Spec, a.Type, dash(a.DelegateOf)}, " "))
	}
	return rows
}

// delResults returns "type plugin freed|nothing" for every config del ran.
func (n *ctlNode) delResults(id string) []string {
	n.t.Helper()
	r := n.ctl("del", "--id", id, "-o", "json")
	var out struct {
		Results []struct {
			Type, Plugin string
			Freed        bool
			Error        any
		}
	}
	r.json(n.t, &out)
	if r.status != 0 {
		n.t.Fatalf("del: %d %s %s", r.status, r.stdout, r.stderr)
	}
	var rows []string
	for _, e := range out.Results {
		res := "nothing"
		if e.Freed {
			res = "freed"
		}
		rows = append(rows, e.Type+" "+e.Plugin+" "+res)
	}
	return rows
}

// gcResults returns "type plugin id,id" for every config gc ran.
func (n *ctlNode) gcResults(args ...string) []string {
	n.t.Helper()
	r := n.ctl(append([]string{"gc", "-o", "json"}, args...)...)
	var out struct {
		Results []struct {
			Type, Plugin string
			Freed        []string
		}
	}
	r.json(n.t, &out)
	if r.status != 0 {
		n.t.Fatalf("gc %v: %d %s %s", args, r.status, r.stdout, r.stderr)
	}
	var rows []string
	for _, e := range out.Results {
		rows = append(rows, e.Type+" "+e.Plugin+" "+dash(strings.Join(e.Freed, ",")))
	}
	return rows
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func wantRows(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// The generic plugin keeps kvm, fuse and tun in one record per id: ls,
// del and gc name each by its own type.
func TestCdictlGenericTypes(t *testing.T) {
	n := genericTypesNode(t)
	if r := n.ctl("add", "--id", "sandbox-1", "kvm:1,fuse:1,tun:1"); r.status != 0 {
		t.Fatalf("add: %d %s %s", r.status, r.stdout, r.stderr)
	}
	if r := n.ctl("add", "--id", "vm-1", "kvm:1"); r.status != 0 {
		t.Fatalf("add: %d %s %s", r.status, r.stdout, r.stderr)
	}
	if r := n.ctl("add", "--id", "build-1", "fuse:1"); r.status != 0 {
		t.Fatalf("add: %d %s %s", r.status, r.stdout, r.stderr)
	}
	wantRows(t, "ls", n.lsTypes(), []string{
		"build-1 generic fuse fuse -",
		"sandbox-1 generic kvm kvm -", "sandbox-1 generic fuse fuse -", "sandbox-1 generic tun tun -",
		"vm-1 generic kvm kvm -",
	})
	// A replay of types the record holds beside its first is a replay,
	// not two types touching a plugin that holds something (code 104).
	if r := n.ctl("add", "--id", "sandbox-1", "fuse:1,tun:1"); r.status != 0 {
		t.Fatalf("replay: %d %s %s", r.status, r.stdout, r.stderr)
	}
	// configs load sorted by folder: fuse.d, kvm.d, tun.d.
	wantRows(t, "gc --dry-run --none-valid", n.gcResults("--dry-run", "--none-valid"), []string{
		"fuse generic build-1,sandbox-1", "kvm generic sandbox-1,vm-1", "tun generic sandbox-1",
	})
	wantRows(t, "del of an id that held kvm only", n.delResults("vm-1"), []string{
		"fuse generic nothing", "kvm generic freed", "tun generic nothing",
	})
	wantRows(t, "gc --valid build-1", n.gcResults("--valid", "build-1"), []string{
		"fuse generic sandbox-1", "kvm generic sandbox-1", "tun generic sandbox-1",
	})
	wantRows(t, "ls after gc", n.lsTypes(), []string{"build-1 generic fuse fuse -"})
}

// cdictl devices counts the shares held, not the ids holding them: ids
// holding 1, 2 and 5 shares of an 8-share kvm hold all 8, as the next ADD
// finds.
func TestCdictlDevicesCountsShares(t *testing.T) {
	n := genericTypesNode(t)
	for _, add := range [][2]string{{"vm-1", "kvm:1"}, {"vm-2", "kvm:2"}, {"vm-3", "kvm:5"}} {
		if r := n.ctl("add", "--id", add[0], add[1]); r.status != 0 {
			t.Fatalf("add %v: %d %s %s", add, r.status, r.stdout, r.stderr)
		}
	}
	if r := n.ctl("add", "--id", "vm-4", "kvm:1"); r.status != 1 || !strings.Contains(r.stdout, "want 1, 0 free") {
		t.Fatalf("a ninth share: %d %s %s", r.status, r.stdout, r.stderr)
	}
	r := n.ctl("devices", "kvm", "-o", "table", "--no-headers")
	if got := strings.Join(strings.Fields(r.stdout), " "); r.status != 0 || got != "kvm generic kvm /dev/kvm - - - - 8 of 8 shares held by vm-1, vm-2 (2), vm-3 (5)" {
		t.Fatalf("devices: %d %q %s", r.status, got, r.stderr)
	}
	var out struct {
		Plugins []struct {
			Devices []struct {
				Shares  int
				Holders []string
			}
		}
	}
	n.ctl("devices", "kvm", "-o", "json").json(t, &out)
	if d := out.Plugins[0].Devices[0]; d.Shares != 8 || strings.Join(d.Holders, ",") != "vm-1,vm-2,vm-2,vm-3,vm-3,vm-3,vm-3,vm-3" {
		t.Fatalf("devices JSON: %+v", out)
	}
}

// On the demo host drm is both gpu and sriov's delegate for vgpu: its
// record of an id may hold both, and the vgpu allocation is sriov's.
func TestCdictlDelegateTypes(t *testing.T) {
	n := demoNode(t, "../../demo/conf")
	for _, add := range [][2]string{{"pod-z", "gpu:1,vgpu:1"}, {"vm-2", "vgpu:1"}} {
		if r := n.ctl("add", "--id", add[0], add[1]); r.status != 0 {
			t.Fatalf("add %v: %d %s %s", add, r.status, r.stdout, r.stderr)
		}
	}
	wantRows(t, "ls", n.lsTypes(), []string{
		"pod-z drm gpu gpu -", "pod-z drm vgpu vgpu sriov", "vm-2 drm vgpu vgpu sriov",
		"pod-z sriov vgpu vgpu -", "vm-2 sriov vgpu vgpu -",
	})
	r := n.ctl("ls", "-o", "table")
	if !strings.Contains(r.stdout, "drm (delegate of sriov)  vgpu:1") || strings.Count(r.stdout, "delegate of sriov") != 2 {
		t.Errorf("ls table does not label both delegate rows:\n%s", r.stdout)
	}
	// configs load sorted by folder: gpu.d, tty.d, vgpu.d.
	wantRows(t, "gc --dry-run --none-valid", n.gcResults("--dry-run", "--none-valid"), []string{
		"gpu drm pod-z", "tty generic-tty -", "vgpu sriov pod-z,vm-2",
	})
	wantRows(t, "del of an id that held vgpu only", n.delResults("vm-2"), []string{
		"gpu drm nothing", "tty generic-tty nothing", "vgpu sriov freed",
	})
	wantRows(t, "gc --none-valid", n.gcResults("--none-valid"), []string{
		"gpu drm pod-z", "tty generic-tty -", "vgpu sriov pod-z",
	})
	wantRows(t, "ls after gc", n.lsTypes(), nil)
}
