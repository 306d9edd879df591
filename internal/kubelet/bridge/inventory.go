package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/cdi-exec/plugins/internal/kubelet/deviceplugin"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

// entry is one device of a plugin's DEVICES answer, as the bridge uses it.
type entry struct {
	protocol.DeviceInfo
	conf int // index of the config that reported it
}

// inventory is what the plugins of one resource type report.
type inventory struct {
	entries []entry // usable devices with a valid key, first config first
	skipped []string
	holders []string // every request-id holding a device, usable or not
}

// Devices asks one plugin for its inventory (the DEVICES extension).
func Devices(ctx context.Context, c caller.Caller, conf caller.Config) ([]protocol.DeviceInfo, error) {
	r, err := c.Extension(ctx, conf, protocol.CmdDevices)
	if err != nil {
		return nil, err
	}
	var devs []protocol.DeviceInfo
	if err := json.Unmarshal(r.Object["devices"], &devs); err != nil {
		return nil, &caller.PluginError{Config: conf, Err: fmt.Errorf("DEVICES answer has no devices list: %s", r.Raw)}
	}
	return devs, nil
}

// merge combines the answers of a type's configs. A device is offered when
// it is usable and its key can be named in a pinned ADD; a key two configs
// both report belongs to the first.
func merge(answers [][]protocol.DeviceInfo) inventory {
	var inv inventory
	seen := map[string]bool{}
	for i, devs := range answers {
		for _, d := range devs {
			if d.HeldBy != "" && !slices.Contains(inv.holders, d.HeldBy) {
				inv.holders = append(inv.holders, d.HeldBy)
			}
			switch {
			case !d.Usable || seen[d.Key]:
				continue
			case request.ValidDeviceKey(d.Key) != nil:
				inv.skipped = append(inv.skipped, d.Key)
				continue
			}
			seen[d.Key] = true
			inv.entries = append(inv.entries, entry{DeviceInfo: d, conf: i})
		}
	}
	return inv
}

// offer turns the inventory into the kubelet's view: a device held by a
// request-id the bridge did not make is unhealthy, because the kubelet
// must not hand it out.
func (inv inventory) offer(typ string) []deviceplugin.Device {
	out := make([]deviceplugin.Device, len(inv.entries))
	for i, e := range inv.entries {
		out[i] = deviceplugin.Device{
			ID:      e.Key,
			NUMA:    e.NUMA,
			PCIe:    chain(e.DeviceInfo),
			Healthy: e.HeldBy == "" || madeID(e.HeldBy, typ),
			Free:    e.HeldBy == "",
		}
	}
	return out
}

// held returns the ids the bridge made that hold devices of the inventory.
func (inv inventory) held(typ string) []string {
	var ids []string
	for _, id := range inv.holders {
		if madeID(id, typ) {
			ids = append(ids, id)
		}
	}
	return ids
}

// chain rebuilds a device's place in the PCIe tree as internal/alloc reads it:
// the root complex, the bridges, and the device's own function when it is
// one (a GPU keyed by its PCI address; a USB serial tty hangs off the last
// bridge).
func chain(d protocol.DeviceInfo) []string {
	if d.PCIeRoot == "" {
		return nil
	}
	c := append([]string{d.PCIeRoot}, d.PCIeBridges...)
	if request.IsPCIAddr(d.Key) {
		c = append(c, d.Key)
	}
	return c
}
