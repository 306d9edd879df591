// Package inventory is what both Kubernetes modes of cdi-kubelet-plugin
// (internal/kubelet/deviceplugin, internal/kubelet/dra) know of a node's
// devices, read by one set of rules: the plugin configs of each resource
// type (Configs), the DEVICES answer of one config's plugin (Devices), how
// the answers of a type's configs combine (Merge), and a Poller that keeps
// the last good answer of every config of a type and says which config
// owns which key (Groups). Every call to a plugin goes through pkg/caller.
// docs/kubernetes.md describes the rules.
package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	sigsjson "sigs.k8s.io/json"

	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

// Inventory is what the configs of one resource type offer: the usable
// devices whose keys a pinned ADD can name, a key two configs report
// belonging to the first.
type Inventory struct {
	Devices []protocol.DeviceInfo
	Conf    []int    // Conf[i] is the index of the config that reported Devices[i]
	Skipped []string // keys left out because a pinned ADD cannot name them
	// Holders are the request-ids that hold a device of any config,
	// usable or not, in the order first seen.
	Holders []string
	// Unit maps the key of each share device but the first of a shared
	// unit (ShareKey) to the unit's key, which a pinned ADD names (Units).
	Unit map[string]string
	// Shared are the shared units' own DEVICES entries (shares and
	// holders), by key, the first config's: the DRA mode offers such a
	// unit as one device of N shares where the API server has consumable
	// capacity.
	Shared map[string]protocol.DeviceInfo
}

// ShareKey is the key of share device i > 0 of a unit that several
// requests may hold at once (DEVICES' shares; docs/kubernetes.md, "Shared
// units"): <key>-s<i>. Share 0 is the unit's own key.
func ShareKey(key string, i int) string { return fmt.Sprintf("%s-s%d", key, i) }

// DefaultMaxPods is the kubelet's default --max-pods (110): the shares
// a unit of unlimited shares (DEVICES unlimited) is offered as when the
// node's allocatable pods are not known, which is always in the
// device-plugin mode (it has no API client) and in the DRA mode until
// its node is read.
const DefaultMaxPods = 110

// Bound returns devs with each unit of unlimited shares given n shares,
// and never fewer than it has holders, so that both modes offer it as
// the unit of n shares it can be on this node, where no more than n pods
// run. A unit bound to one share is a device of its own, its holder
// HeldBy. Other devices stay as they are, and devs is not changed.
func Bound(devs []protocol.DeviceInfo, n int) []protocol.DeviceInfo {
	if !slices.ContainsFunc(devs, func(d protocol.DeviceInfo) bool { return d.Unlimited }) {
		return devs
	}
	out := slices.Clone(devs)
	for i := range out {
		d := &out[i]
		if !d.Unlimited {
			continue
		}
		d.Unlimited, d.Shares = false, max(n, len(d.Holders), 1)
		if d.Shares == 1 {
			if len(d.Holders) == 1 {
				d.HeldBy = d.Holders[0]
			}
			d.Shares, d.Holders = 0, nil
		}
	}
	return out
}

// Expand lists each shared unit of a DEVICES answer as its share devices,
// <key>, <key>-s1, ..., so that both modes offer a unit once per share.
// The request-ids holding shares take the last of them, so that the first
// are the free ones. Other devices stay as they are.
func Expand(devs []protocol.DeviceInfo) []protocol.DeviceInfo {
	out := make([]protocol.DeviceInfo, 0, len(devs))
	for _, d := range devs {
		if d.Shares <= 1 {
			out = append(out, d)
			continue
		}
		for i := range d.Shares {
			s := d
			s.Shares, s.Holders = 0, nil
			if i > 0 {
				s.Key = ShareKey(d.Key, i)
			}
			if h := d.Shares - 1 - i; h < len(d.Holders) {
				s.HeldBy = d.Holders[h]
			}
			out = append(out, s)
		}
	}
	return out
}

// Units maps keys of the inventory to the keys a pinned ADD names: a
// shared unit's share devices to the unit, each unit once (a request
// holds one share of a unit however many of its share devices it got),
// in order.
func (inv Inventory) Units(keys []string) []string {
	var out []string
	for _, k := range keys {
		if u, ok := inv.Unit[k]; ok {
			k = u
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// UnitOf is the key a pinned ADD names for key (Units).
func (inv Inventory) UnitOf(key string) string {
	if u, ok := inv.Unit[key]; ok {
		return u
	}
	return key
}

// Devices asks one plugin for its inventory (the DEVICES extension).
func Devices(ctx context.Context, c caller.Caller, conf caller.Config) ([]protocol.DeviceInfo, error) {
	r, err := c.Extension(ctx, conf, protocol.CmdDevices)
	if err != nil {
		return nil, err
	}
	// Strict as sigs.k8s.io/json is, but for members a newer plugin may
	// add: a caller ignores what it does not use (docs/protocol.md).
	var devs []protocol.DeviceInfo
	strict, err := sigsjson.UnmarshalStrict(r.Object["devices"], &devs, sigsjson.DisallowDuplicateFields)
	if err == nil {
		err = errors.Join(strict...)
	}
	if err != nil || r.Object["devices"] == nil {
		return nil, &caller.PluginError{Config: conf, Err: fmt.Errorf("DEVICES answer has no devices list (%v): %s", err, r.Raw)}
	}
	return devs, nil
}

// Merge combines the DEVICES answers of a type's configs, in config order.
// A device is offered when it is usable and its key can be named in a
// pinned ADD; a key two configs both report belongs to the first.
func Merge(answers [][]protocol.DeviceInfo) Inventory {
	var inv Inventory
	seen := map[string]bool{}
	for i, devs := range answers {
		for _, d := range devs {
			if _, ok := inv.Shared[d.Key]; d.Shares > 1 && !ok {
				if inv.Shared == nil {
					inv.Shared = map[string]protocol.DeviceInfo{}
				}
				inv.Shared[d.Key] = d
			}
			for s := 1; s < d.Shares; s++ {
				if inv.Unit == nil {
					inv.Unit = map[string]string{}
				}
				if _, ok := inv.Unit[ShareKey(d.Key, s)]; !ok {
					inv.Unit[ShareKey(d.Key, s)] = d.Key
				}
			}
		}
		for _, d := range Expand(devs) {
			if d.HeldBy != "" && !slices.Contains(inv.Holders, d.HeldBy) {
				inv.Holders = append(inv.Holders, d.HeldBy)
			}
			switch {
			case !d.Usable || seen[d.Key]:
				continue
			case request.ValidDeviceKey(d.Key) != nil:
				inv.Skipped = append(inv.Skipped, d.Key)
				continue
			}
			seen[d.Key] = true
			inv.Devices = append(inv.Devices, d)
			inv.Conf = append(inv.Conf, i)
		}
	}
	return inv
}

// Order returns keys with those of the inventory first, in the
// inventory's order, then the others in their own order.
func (inv Inventory) Order(keys []string) []string {
	var out []string
	for _, d := range inv.Devices {
		if slices.Contains(keys, d.Key) && !slices.Contains(out, d.Key) {
			out = append(out, d.Key)
		}
	}
	for _, k := range keys {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// Group is the keys one config's plugin is asked for in a pinned ADD.
type Group struct {
	Conf int // index of the config
	Keys []string
}

// Groups splits keys by the config that reported them, keeping their
// order, first config first. A key the inventory does not know goes to
// the first config, whose plugin then says what is wrong with it.
func (inv Inventory) Groups(keys []string) []Group {
	var gs []Group
	for _, k := range keys {
		conf := 0
		if i := slices.IndexFunc(inv.Devices, func(d protocol.DeviceInfo) bool { return d.Key == k }); i >= 0 {
			conf = inv.Conf[i]
		}
		i := slices.IndexFunc(gs, func(g Group) bool { return g.Conf == conf })
		if i < 0 {
			gs = append(gs, Group{Conf: conf})
			i = len(gs) - 1
		}
		gs[i].Keys = append(gs[i].Keys, k)
	}
	slices.SortStableFunc(gs, func(a, b Group) int { return a.Conf - b.Conf })
	return gs
}

// Poller asks the plugins of one resource type's configs for their
// devices and keeps what they said. It is safe for concurrent use; what
// it returns is shared and must not be changed.
type Poller struct {
	caller caller.Caller
	confs  []caller.Config
	log    *slog.Logger

	mu      sync.Mutex
	answers [][]protocol.DeviceInfo // last good DEVICES answer per config, as the plugin gave it
	failing []bool                  // whether the last DEVICES of a config failed
	merged  Inventory               // Merge of answers after the last complete Refresh
	// shares are what a unit of unlimited shares is offered as (Bound):
	// DefaultMaxPods until SetUnlimitedShares says otherwise.
	shares int
	merge  bool // a Refresh completed, so merged stands for answers
}

// NewPoller returns a poller of the configs' plugins that has asked
// nothing yet.
func NewPoller(c caller.Caller, confs []caller.Config, log *slog.Logger) *Poller {
	return &Poller{
		caller: c, confs: confs, log: log,
		answers: make([][]protocol.DeviceInfo, len(confs)), failing: make([]bool, len(confs)),
		shares: DefaultMaxPods,
	}
}

// SetUnlimitedShares makes a unit of unlimited shares n shares (Bound),
// merging the last answers anew when a Refresh completed. It reports
// whether n changed.
func (p *Poller) SetUnlimitedShares(n int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n == p.shares {
		return false
	}
	p.shares = n
	if p.merge {
		p.merged = p.mergeLocked()
	}
	return true
}

// UnlimitedShares returns the shares a unit of unlimited shares is
// offered as.
func (p *Poller) UnlimitedShares() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.shares
}

// Unlimited reports whether a last answer has a unit of unlimited
// shares.
func (p *Poller) Unlimited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, devs := range p.answers {
		if slices.ContainsFunc(devs, func(d protocol.DeviceInfo) bool { return d.Unlimited }) {
			return true
		}
	}
	return false
}

// bound is the answers with units of unlimited shares Bound. Called
// with mu held.
func (p *Poller) bound() [][]protocol.DeviceInfo {
	out := make([][]protocol.DeviceInfo, len(p.answers))
	for i, devs := range p.answers {
		out[i] = Bound(devs, p.shares)
	}
	return out
}

// mergeLocked merges the answers, bound. Called with mu held.
func (p *Poller) mergeLocked() Inventory { return Merge(p.bound()) }

// Configs returns the configs polled, in order.
func (p *Poller) Configs() []caller.Config { return p.confs }

// Refresh asks every config's plugin for its devices and keeps each good
// answer. A plugin that fails keeps its last answer, so a hanging or
// crashing plugin does not make its devices flap; its failure is logged
// once, and so is its recovery. When every config was asked, the answers
// are merged anew (Inventory). It returns how many configs failed, and ok
// false when ctx ended first: a cancelled run says nothing of the plugin.
func (p *Poller) Refresh(ctx context.Context) (failed int, ok bool) {
	for i, conf := range p.confs {
		devs, err := Devices(ctx, p.caller, conf)
		if ctx.Err() != nil {
			return failed, false
		}
		if err != nil {
			failed++
		}
		p.mu.Lock()
		wasFailing := p.failing[i]
		p.failing[i] = err != nil
		if err == nil {
			p.answers[i] = devs
		}
		p.mu.Unlock()
		switch {
		case err != nil && !wasFailing:
			p.log.Error("listing devices failed; keeping the last list", "config", conf.File, "err", err)
		case err == nil && wasFailing:
			p.log.Info("listing devices works again", "config", conf.File)
		}
	}
	p.mu.Lock()
	p.merged, p.merge = p.mergeLocked(), true
	p.mu.Unlock()
	return failed, true
}

// Inventory returns the merged answers of the last complete Refresh.
func (p *Poller) Inventory() Inventory {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.merged
}

// Answers returns the last good answer of every config, in config order,
// usable or not, with shared units as their share devices (Bound,
// Expand).
func (p *Poller) Answers() [][]protocol.DeviceInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.bound()
	for i, devs := range out {
		out[i] = Expand(devs)
	}
	return out
}

// Reported returns the first config whose last answer reports key, and
// its report.
func (p *Poller) Reported(key string) (int, protocol.DeviceInfo, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, devs := range p.bound() {
		for _, dev := range Expand(devs) {
			if dev.Key == key {
				return i, dev, true
			}
		}
	}
	return 0, protocol.DeviceInfo{}, false
}

// Every calls fn every interval, and whenever poke delivers (a nil poke
// never does), until ctx ends.
func Every(ctx context.Context, interval time.Duration, poke <-chan struct{}, fn func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-poke:
		}
		fn()
	}
}
