package deviceplugin

import (
	"reflect"
	"slices"
	"testing"

	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
	"github.com/cdi-exec/plugins/internal/kubelet/podgc"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

func TestMergeAndOffer(t *testing.T) {
	mine := podgc.RequestID("cdi-exec.io/gpu", "gpu", []string{"0000:01:00.0"})
	stale := podgc.RequestID("cdi-exec.io/gpu", "gpu", []string{"0000:09:00.0"})
	answers := [][]protocol.DeviceInfo{
		{ // first config
			{Key: "0000:01:00.0", NUMA: 0, Usable: true, HeldBy: mine, PCIeRoot: "pci0000:00", PCIeBridges: []string{"0000:00:01.0"}},
			{Key: "0000:02:00.0", NUMA: 1, Usable: true, HeldBy: "cdictl-pod"},
			{Key: "0000:03:00.0", NUMA: -1, Usable: true},
			{Key: "ttyUSB0", NUMA: -1, Usable: true, PCIeRoot: "pci0000:00", PCIeBridges: []string{"0000:00:14.0"}},
			{Key: "0000:09:00.0", NUMA: 0, Usable: false, Reason: "no /dev node", HeldBy: stale},
			{Key: "/sys/devices/platform/simple-framebuffer.0", NUMA: -1, Usable: true},
		},
		{ // second config: a key the first owns, and one of its own
			{Key: "0000:03:00.0", NUMA: -1, Usable: true, HeldBy: "k8s-dra-0b9f"},
			{Key: "0000:04:00.0", NUMA: 1, Usable: true},
		},
	}
	inv := inventory.Merge(answers)
	want := []Device{
		{ID: "0000:01:00.0", NUMA: 0, Healthy: true, PCIe: []string{"pci0000:00", "0000:00:01.0", "0000:01:00.0"}},
		{ID: "0000:02:00.0", NUMA: 1},
		{ID: "0000:03:00.0", NUMA: -1, Healthy: true, Free: true},
		{ID: "ttyUSB0", NUMA: -1, Healthy: true, Free: true, PCIe: []string{"pci0000:00", "0000:00:14.0"}},
		{ID: "0000:04:00.0", NUMA: 1, Healthy: true, Free: true},
	}
	if got := offer(inv, "gpu"); !reflect.DeepEqual(got, want) {
		t.Errorf("offer:\n got %+v\nwant %+v", got, want)
	}
	if got := inv.Conf[4]; got != 1 {
		t.Errorf("0000:04:00.0 belongs to config %d, want 1", got)
	}
	if !slices.Equal(inv.Skipped, []string{"/sys/devices/platform/simple-framebuffer.0"}) {
		t.Errorf("skipped %v", inv.Skipped)
	}
	// Its own ids, also of devices it does not offer; never another
	// caller's, nor another type's.
	if got := podgc.Held(inv.Holders, "gpu"); !slices.Equal(got, []string{mine, stale}) {
		t.Errorf("held %v", got)
	}
	if got := podgc.Held(inv.Holders, "tty"); len(got) != 0 {
		t.Errorf("held as tty %v", got)
	}
}

// A unit that several requests may hold at once (the generic plugin's
// shares) is offered once per share: <key>, <key>-s1, ...; the requests
// holding shares take the last ones, so that a share held by another
// caller is unhealthy and the free ones come first. A pinned ADD names
// the unit once, however many of its share devices it got.
func TestMergeShares(t *testing.T) {
	mine := podgc.RequestID("cdi-exec.io/kvm", "kvm", []string{"kvm-s2"})
	answers := [][]protocol.DeviceInfo{{
		{Key: "kvm", NUMA: -1, Usable: true, Shares: 4, Holders: []string{mine, "cdictl-vm"}},
		{Key: "fuse", NUMA: -1, Usable: true, Shares: 2},
	}}
	inv := inventory.Merge(answers)
	want := []Device{
		{ID: "kvm", NUMA: -1, Healthy: true, Free: true},
		{ID: "kvm-s1", NUMA: -1, Healthy: true, Free: true},
		{ID: "kvm-s2", NUMA: -1},
		{ID: "kvm-s3", NUMA: -1, Healthy: true},
		{ID: "fuse", NUMA: -1, Healthy: true, Free: true},
		{ID: "fuse-s1", NUMA: -1, Healthy: true, Free: true},
	}
	if got := offer(inv, "kvm"); !reflect.DeepEqual(got, want) {
		t.Errorf("offer:\n got %+v\nwant %+v", got, want)
	}
	if got := podgc.Held(inv.Holders, "kvm"); !slices.Equal(got, []string{mine}) {
		t.Errorf("held %v", got)
	}
	if got := inv.Units([]string{"kvm-s1", "kvm", "fuse-s1", "tty3"}); !slices.Equal(got, []string{"kvm", "fuse", "tty3"}) {
		t.Errorf("Units %v", got)
	}
}
