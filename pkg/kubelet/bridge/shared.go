package bridge

import (
	"context"

	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// This file shares the bridge's config and inventory rules with the DRA
// mode (pkg/kubelet/dra), so that both modes load configs and read
// inventories the same way.

// Configs loads the plugin configs under dir, grouped by resource type,
// keeping only types when any are given; each config without a cdi_spec
// arg gets one of kind <vendor>/<type> in specDir. Problems are the
// configs left out.
func Configs(dir string, types []string, vendor, specDir string) (map[string][]caller.Config, []caller.Problem, error) {
	return configs(dir, types, vendor, specDir)
}

// Devices asks one plugin for its inventory (the DEVICES extension).
func Devices(ctx context.Context, c caller.Caller, conf caller.Config) ([]protocol.DeviceInfo, error) {
	return devices(ctx, c, conf)
}

// Inventory is what the configs of one resource type offer: the usable
// devices whose keys a pinned ADD can name, a key two configs report
// belonging to the first.
type Inventory struct {
	Devices []protocol.DeviceInfo
	Conf    []int    // Conf[i] is the index of the config that reported Devices[i]
	Skipped []string // keys left out because a pinned ADD cannot name them
}

// Merge combines the DEVICES answers of a type's configs, in config order.
func Merge(answers [][]protocol.DeviceInfo) Inventory {
	inv := merge(answers)
	out := Inventory{Skipped: inv.skipped}
	for _, e := range inv.entries {
		out.Devices = append(out.Devices, e.DeviceInfo)
		out.Conf = append(out.Conf, e.conf)
	}
	return out
}
