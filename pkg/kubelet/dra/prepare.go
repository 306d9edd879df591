package dra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/cdi-exec/plugins/pkg/abnf"
	"github.com/cdi-exec/plugins/pkg/kubelet/claimstate"
	"github.com/cdi-exec/plugins/pkg/kubelet/devname"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// PrepareResourceClaims implements kubeletplugin.DRAPlugin: one pinned
// ADD per claim, under the claim's UID, of the devices the scheduler
// allocated from this driver's pool.
func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		out[c.UID] = d.prepare(ctx, c)
	}
	return out, nil
}

// prepare prepares one claim and logs one line about it.
func (d *driver) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	start := time.Now()
	d.ops.Lock()
	defer d.ops.Unlock()
	log := d.log.With("claim", claim.Namespace+"/"+claim.Name, "uid", claim.UID)
	results, keys, err := d.allocated(claim)
	if err == nil && len(results) == 0 {
		log.Info("prepare: nothing allocated from this driver's pool")
		return kubeletplugin.PrepareResult{}
	}
	var cdi []string
	if err == nil {
		cdi, err = d.pin(ctx, claim, keys)
	}
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		log.Error("prepare failed", "devices", keys, "took", took, "err", err)
		return kubeletplugin.PrepareResult{Err: err}
	}
	log.Info("prepare", "devices", keys, "cdiDevices", cdi, "took", took)
	res := kubeletplugin.PrepareResult{}
	for _, r := range results {
		res.Devices = append(res.Devices, kubeletplugin.Device{
			Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, CDIDeviceIDs: cdi,
		})
	}
	return res
}

// allocated returns the claim's allocation results from this driver's
// pool and their device keys, in the allocation's order.
func (d *driver) allocated(claim *resourceapi.ResourceClaim) ([]resourceapi.DeviceRequestAllocationResult, []string, error) {
	if claim.Status.Allocation == nil {
		return nil, nil, errors.New("the claim is not allocated")
	}
	var results []resourceapi.DeviceRequestAllocationResult
	var keys []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.name {
			continue
		}
		if r.Pool != d.node {
			return nil, nil, fmt.Errorf("device %s is from pool %q, not this node's", r.Device, r.Pool)
		}
		if r.AdminAccess != nil && *r.AdminAccess {
			return nil, nil, fmt.Errorf("device %s: admin access is not supported: the exec plugins hand a device to one request at a time", r.Device)
		}
		key, err := devname.Key(r.Device)
		if err != nil {
			return nil, nil, err
		}
		results = append(results, r)
		if !slices.Contains(keys, key) {
			keys = append(keys, key)
		}
	}
	return results, keys, nil
}

// pin records the claim and runs the pinned ADDs. A claim that was never
// prepared is taken back whole when they fail; one that was (the kubelet
// prepares again after a restart) keeps what it holds.
func (d *driver) pin(ctx context.Context, claim *resourceapi.ResourceClaim, keys []string) ([]string, error) {
	uid := string(claim.UID)
	var before claimstate.Claim
	err := d.state.Update(ctx, func(cs claimstate.Claims) error {
		before = cs[uid]
		if before.UID == "" {
			cs[uid] = claimstate.Claim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, Keys: keys, Since: time.Now().UTC()}
			return nil
		}
		if !slices.Equal(before.Keys, keys) {
			return fmt.Errorf("the claim holds %v, and is now asked for %v", before.Keys, keys)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	cdi, err := d.add(ctx, uid, keys)
	if err != nil {
		if !before.Prepared {
			if _, uerr := d.release(ctx, uid); uerr != nil {
				err = fmt.Errorf("%w; taking it back failed too: %w", err, uerr)
			}
		}
		return nil, err
	}
	err = d.state.Update(ctx, func(cs claimstate.Claims) error {
		c := cs[uid]
		c.Prepared, c.CDIDevices = true, cdi
		cs[uid] = c
		return nil
	})
	return cdi, err
}

// add runs one pinned ADD per config that reported some of the keys and
// returns the CDI device ids of the answers.
func (d *driver) add(ctx context.Context, uid string, keys []string) ([]string, error) {
	var cdi []string
	for _, g := range d.groups(keys) {
		added, err := d.caller.AddDevices(ctx, d.confs[g.conf], uid, abnf.Spec{Type: d.typ}, g.keys)
		if err != nil {
			return nil, err
		}
		var names []string
		if raw, ok := added.Extra["cdiDevices"]; ok {
			if err := json.Unmarshal(raw, &names); err != nil {
				return nil, fmt.Errorf("%s: cdiDevices of the ADD answer: %w", d.confs[g.conf].File, err)
			}
		}
		cdi = append(cdi, names...)
	}
	if len(cdi) == 0 {
		return nil, errors.New("the plugins' ADD answers name no CDI devices; give their configs a cdi_spec arg, or none at all")
	}
	return cdi, nil
}

// group is the keys one config's plugin is asked for.
type group struct {
	conf int
	keys []string
}

// groups splits keys by the config whose plugin reported them, keeping
// their order, first config first. A key the inventory does not know goes
// to the first config, whose plugin then says what is wrong with it.
func (d *driver) groups(keys []string) []group {
	d.mu.Lock()
	defer d.mu.Unlock()
	var gs []group
	for _, k := range keys {
		conf := 0
		if i := slices.IndexFunc(d.inv.Devices, func(dev protocol.DeviceInfo) bool { return dev.Key == k }); i >= 0 {
			conf = d.inv.Conf[i]
		}
		i := slices.IndexFunc(gs, func(g group) bool { return g.conf == conf })
		if i < 0 {
			gs = append(gs, group{conf: conf})
			i = len(gs) - 1
		}
		gs[i].keys = append(gs[i].keys, k)
	}
	slices.SortStableFunc(gs, func(a, b group) int { return a.conf - b.conf })
	return gs
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: DEL of each
// claim's UID. It succeeds once nothing is held under the UID, so the
// kubelet's retries are harmless.
func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = d.unprepare(ctx, c)
	}
	return out, nil
}

func (d *driver) unprepare(ctx context.Context, c kubeletplugin.NamespacedObject) error {
	start := time.Now()
	d.ops.Lock()
	defer d.ops.Unlock()
	held, err := d.release(ctx, string(c.UID))
	log := d.log.With("claim", c.Namespace+"/"+c.Name, "uid", c.UID, "took", time.Since(start).Round(time.Millisecond))
	if err != nil {
		log.Error("unprepare failed", "err", err)
		return err
	}
	log.Info("unprepare", "held", held)
	return nil
}

// release sends DEL for uid to every config of the type, then drops the
// claim's record. When a DEL fails, the record stays, so that a retry or
// the stale-claim collector tries again. held reports whether any plugin
// held something under uid.
func (d *driver) release(ctx context.Context, uid string) (held bool, err error) {
	var errs []error
	for _, conf := range d.confs {
		h, err := d.caller.Del(ctx, conf, uid)
		held = held || h
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return held, err
	}
	return held, d.state.Update(ctx, func(cs claimstate.Claims) error {
		delete(cs, uid)
		return nil
	})
}
