package bridge

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// This file shares the bridge's inventory rules with the DRA mode
// (internal/kubelet/dra), so that both modes read inventories the same way;
// Configs and Devices serve both modes as they are.

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

// Refresh asks every config's plugin for its devices and keeps each good
// answer in answers[i], under mu. A plugin that fails keeps its last
// answer, so a hanging or crashing plugin does not make its devices flap;
// failing[i] remembers the failure, which is logged once, and so is the
// recovery. It returns how many configs failed, and ok false when ctx
// ended first: a cancelled run says nothing of the plugin.
func Refresh(ctx context.Context, c caller.Caller, confs []caller.Config, mu *sync.Mutex, answers [][]protocol.DeviceInfo, failing []bool, log *slog.Logger) (failed int, ok bool) {
	for i, conf := range confs {
		devs, err := Devices(ctx, c, conf)
		if ctx.Err() != nil {
			return failed, false
		}
		if err != nil {
			failed++
		}
		mu.Lock()
		wasFailing := failing[i]
		failing[i] = err != nil
		if err == nil {
			answers[i] = devs
		}
		mu.Unlock()
		switch {
		case err != nil && !wasFailing:
			log.Error("listing devices failed; keeping the last list", "config", conf.File, "err", err)
		case err == nil && wasFailing:
			log.Info("listing devices works again", "config", conf.File)
		}
	}
	return failed, true
}

// Every calls fn every interval, and whenever poke delivers (a nil poke
// never does), until ctx ends.
func Every(ctx context.Context, interval time.Duration, poke <-chan struct{}, fn func()) {
	every(ctx, interval, poke, fn)
}
