package dra

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/kubelet/claimconfig"
	"github.com/cdi-exec/plugins/internal/kubelet/claimstate"
	"github.com/cdi-exec/plugins/internal/kubelet/devname"
	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
	"github.com/cdi-exec/plugins/pkg/request"
)

// PrepareResourceClaims prepares the claims the kubelet sends (driver.PrepareResourceClaims): one pinned
// ADD per config, under the claim's UID, of the devices the scheduler
// allocated from this driver's pool, and for devices allocated with admin
// access a CDI spec of the driver's own (admin.go).
func (lc *lifecycle) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		out[c.UID] = lc.prepare(ctx, c)
	}
	return out, nil
}

// rollbackTimeout bounds taking back a claim whose prepare failed.
const rollbackTimeout = 10 * time.Second

// result is one device allocated to a claim from this driver's pool.
type result struct {
	resourceapi.DeviceRequestAllocationResult
	key   string // the device's key in the exec protocol
	admin bool   // allocated with admin access
	// slots is how many share slots of a shared unit offered with
	// consumable capacity the result holds (its consumed capShares,
	// rounded up); 0 for a result without a shareID.
	slots int
}

// prepare prepares one claim, logs one line about it, counts it in the
// metrics, and records an Event on the claim when it fails. Each device's
// CDI ids are its own (cdispec.KeyDeviceName), so that a container naming
// one request of the claim gets that request's devices only.
func (lc *lifecycle) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	start := time.Now()
	log := lc.log.With("claim", claim.Namespace+"/"+claim.Name, "uid", claim.UID)
	if err := checkUID(string(claim.UID)); err != nil {
		lc.metrics.Prepared(lc.name, err, time.Since(start))
		log.Error("prepare refused", "err", err)
		return kubeletplugin.PrepareResult{Err: err}
	}
	results, err := lc.allocated(claim)
	if err == nil && len(results) == 0 {
		lc.metrics.Prepared(lc.name, nil, time.Since(start))
		log.Info("prepare: nothing allocated from this driver's pool")
		return kubeletplugin.PrepareResult{}
	}
	keys, adminKeys := splitKeys(results)
	var cdi map[string][]string
	if err == nil {
		cdi, err = lc.pin(ctx, claim, results)
	}
	lc.metrics.Prepared(lc.name, err, time.Since(start))
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		log.Error("prepare failed", "devices", keys, "adminDevices", adminKeys, "took", took, "err", err)
		lc.prepareFailed(claimRef(claim.Namespace, claim.Name, claim.UID), err)
		return kubeletplugin.PrepareResult{Err: err}
	}
	log.Info("prepare", "devices", keys, "adminDevices", adminKeys, "cdiDevices", cdi, "took", took)
	res := kubeletplugin.PrepareResult{}
	infos := lc.deviceInfos(results)
	for _, r := range results {
		dev := kubeletplugin.Device{
			Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, CDIDeviceIDs: cdi[r.key], ShareID: r.ShareID,
		}
		if lc.metadata {
			dev.Metadata = lc.deviceMetadata(r, infos)
		}
		res.Devices = append(res.Devices, dev)
	}
	if lc.status != nil {
		lc.status.set(claimStatus{namespace: claim.Namespace, name: claim.Name, uid: claim.UID, devices: lc.deviceStatuses(results, infos)})
	}
	return res
}

// allocated returns the claim's allocation results from this driver's
// pool, in the allocation's order.
func (lc *lifecycle) allocated(claim *resourceapi.ResourceClaim) ([]result, error) {
	if claim.Status.Allocation == nil {
		return nil, errors.New("the claim is not allocated")
	}
	var out []result
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != lc.name {
			continue
		}
		if r.Pool != lc.node {
			return nil, fmt.Errorf("device %s is from pool %q, not this node's", r.Device, r.Pool)
		}
		key, err := devname.Key(r.Device)
		if err != nil {
			return nil, err
		}
		res := result{DeviceRequestAllocationResult: r, key: key, admin: r.AdminAccess != nil && *r.AdminAccess}
		if r.ShareID != nil && !res.admin {
			res.slots = 1 // the requestPolicy's default
			if q, ok := r.ConsumedCapacity[capShares]; ok {
				res.slots = int(q.Value()) // rounded up
			}
			if res.slots < 1 {
				return nil, fmt.Errorf("device %s (share %s) consumes %v shares", r.Device, *r.ShareID, res.slots)
			}
		}
		out = append(out, res)
	}
	return out, nil
}

// shares are the claim's allocations of shared units' capacity (the
// results with a shareID), as the claim's record keeps them.
func shares(results []result) []claimstate.Share {
	var out []claimstate.Share
	for _, r := range results {
		if r.slots > 0 {
			out = append(out, claimstate.Share{ID: string(*r.ShareID), Key: r.key, Slots: r.slots})
		}
	}
	return out
}

// unitSlots is how often a pinned ADD names each unit: once, or, for a
// unit the claim holds capacity of, once per share slot its shares hold.
func unitSlots(units []string, held []claimstate.Share) []string {
	var out []string
	for _, u := range units {
		n := 0
		for _, sh := range held {
			if sh.Key == u {
				n += sh.Slots
			}
		}
		for range max(n, 1) {
			out = append(out, u)
		}
	}
	return out
}

// splitKeys returns the distinct keys of the results held the ordinary
// way and of those allocated with admin access, in the allocation's order.
func splitKeys(results []result) (keys, admin []string) {
	for _, r := range results {
		dst := &keys
		if r.admin {
			dst = &admin
		}
		if !slices.Contains(*dst, r.key) {
			*dst = append(*dst, r.key)
		}
	}
	return keys, admin
}

// requests returns the distinct requests of the ordinary results.
func requests(results []result) []string {
	var out []string
	for _, r := range results {
		if !r.admin && !slices.Contains(out, r.Request) {
			out = append(out, r.Request)
		}
	}
	return out
}

// pin runs the pinned ADDs of a claim and writes the spec of its
// admin-access devices, then records the claim prepared: one write of the
// claim records, with its fsyncs, per claim prepared, none for a claim
// prepared before (the kubelet prepares again after a restart). The
// record comes after the ADDs, not before: the kubelet checkpoints every
// claim before it asks to prepare it, and unprepares a claim whose pod
// is gone whether its prepare succeeded or not, so a driver that dies
// between ADD and record is still told to free what the ADD held
// (docs/kubernetes.md#preparing-a-claim). A claim that was never
// prepared is taken back whole when that fails; one that was keeps what
// it holds. It returns each key's CDI device ids.
func (lc *lifecycle) pin(ctx context.Context, claim *resourceapi.ResourceClaim, results []result) (map[string][]string, error) {
	uid := string(claim.UID)
	keys, adminKeys := splitKeys(results)
	settings, err := claimconfig.ForClaim(claim, lc.name, lc.plugins(), requests(results))
	if err != nil {
		return nil, err
	}
	claims, err := lc.records.Read(ctx)
	if err != nil {
		return nil, err
	}
	before := claims[uid]
	held := shares(results)
	if err := sameDevices(before, keys, adminKeys, held); err != nil {
		return nil, err
	}
	if cdi, ok := lc.answered(uid, before); ok {
		return cdi, nil
	}
	lc.mu.Lock()
	lc.preparing[uid] = true
	lc.mu.Unlock()
	defer func() {
		lc.mu.Lock()
		delete(lc.preparing, uid)
		lc.mu.Unlock()
	}()
	cdi := map[string][]string{}
	if len(keys) > 0 {
		err = lc.add(ctx, uid, keys, held, settings, cdi)
	}
	if err == nil && len(adminKeys) > 0 {
		err = lc.writeAdminSpec(uid, adminKeys, cdi)
	}
	if err == nil {
		err = lc.record(ctx, claim, keys, adminKeys, held, cdi)
	}
	if err != nil {
		if !before.Prepared {
			// Taken back even when the prepare's context ended (a kubelet
			// that gave up, a driver that stops), within its own bound.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			_, uerr := lc.release(rctx, uid)
			cancel()
			if uerr != nil {
				err = fmt.Errorf("%w; taking it back failed too: %w", err, uerr)
			}
		}
		return nil, err
	}
	return cdi, nil
}

// answered returns the CDI ids of a claim recorded as prepared, by key,
// when the record has every device's and the spec files that define them
// are there: a kubelet that prepares again after it restarted, a retry,
// or the second pod of a shared claim is answered from the record, as the
// first prepare answered, without running a plugin. A claim whose spec
// files are gone (a reboot emptied /var/run/cdi, whose device numbers may
// have changed) replays its ADD instead, which writes them anew.
func (lc *lifecycle) answered(uid string, rec claimstate.Claim) (map[string][]string, bool) {
	if !rec.Prepared {
		return nil, false
	}
	for _, k := range append(slices.Clone(rec.Keys), rec.AdminKeys...) {
		if len(rec.Devices[k]) == 0 {
			return nil, false
		}
	}
	if !lc.specsWritten(uid, rec) {
		return nil, false
	}
	return maps.Clone(rec.Devices), true
}

// claimSpecs returns the cdi_spec of the type's configs for each CDI
// kind the claim's recorded CDI ids name, one per kind, and whether every
// kind has one: the spec files that define the claim's devices.
func (lc *lifecycle) claimSpecs(rec claimstate.Claim) ([]*cdispec.Config, bool) {
	kinds := map[string]bool{}
	for _, ids := range append(slices.Collect(maps.Values(rec.Devices)), rec.CDIDevices) {
		for _, id := range ids {
			kind, _, _ := strings.Cut(id, "=")
			kinds[kind] = true
		}
	}
	var out []*cdispec.Config
	for _, conf := range lc.confs {
		spec, err := inventory.Spec(conf)
		if err != nil || !kinds[spec.Kind] {
			continue
		}
		out = append(out, spec)
		delete(kinds, spec.Kind)
	}
	return out, len(kinds) == 0
}

// specsWritten reports whether every CDI id recorded for a claim has a
// spec file of the claim in its kind's directory.
func (lc *lifecycle) specsWritten(uid string, rec claimstate.Claim) bool {
	specs, all := lc.claimSpecs(rec)
	if !all {
		return false
	}
	for _, spec := range specs {
		if ok, err := spec.Written(uid); err != nil || !ok {
			return false
		}
	}
	return true
}

// sameDevices refuses to prepare a recorded claim for other devices, or
// other shares of a shared unit, than it holds.
func sameDevices(rec claimstate.Claim, keys, adminKeys []string, held []claimstate.Share) error {
	if rec.UID == "" {
		return nil
	}
	if !slices.Equal(rec.Keys, keys) || !slices.Equal(rec.AdminKeys, adminKeys) {
		return fmt.Errorf("the claim holds %v (admin access: %v), and is now asked for %v (admin access: %v)", rec.Keys, rec.AdminKeys, keys, adminKeys)
	}
	if !slices.Equal(rec.Shares, held) {
		return fmt.Errorf("the claim holds the shares %+v, and is now asked for %+v", rec.Shares, held)
	}
	return nil
}

// record records a prepared claim, with its CDI device ids. A record that
// says so already is left as it is, and nothing is written.
func (lc *lifecycle) record(ctx context.Context, claim *resourceapi.ResourceClaim, keys, adminKeys []string, held []claimstate.Share, cdi map[string][]string) error {
	uid := string(claim.UID)
	var all []string
	for _, k := range append(slices.Clone(keys), adminKeys...) {
		for _, id := range cdi[k] {
			if !slices.Contains(all, id) {
				all = append(all, id)
			}
		}
	}
	return lc.records.Update(ctx, func(cs claimstate.Claims) error {
		c := cs[uid]
		if err := sameDevices(c, keys, adminKeys, held); err != nil {
			return err
		}
		if c.UID == "" {
			c = claimstate.Claim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, Keys: keys, AdminKeys: adminKeys, Shares: held, Since: time.Now().UTC()}
		}
		devices := make(map[string][]string, len(keys)+len(adminKeys))
		for _, k := range append(slices.Clone(keys), adminKeys...) {
			devices[k] = cdi[k]
		}
		c.Prepared, c.CDIDevices, c.Devices = true, all, devices
		cs[uid] = c
		return nil
	})
}

// plugins returns the plugins of the type's configs.
func (lc *lifecycle) plugins() []string {
	var out []string
	for _, c := range lc.confs {
		if !slices.Contains(out, c.Plugin) {
			out = append(out, c.Plugin)
		}
	}
	return out
}

// add runs one pinned ADD per config that reported some of the keys, with
// the claim's settings over the config's args, and sets cdi[key] to each
// key's CDI device ids: the device's own entry (the answer's
// cdiKeyDevices), or, from a plugin that names none, the request's
// cdiDevices. A unit the claim holds shares of is named once per share
// slot (unitSlots), and the plugin takes its lowest free slots.
func (lc *lifecycle) add(ctx context.Context, uid string, keys []string, held []claimstate.Share, settings claimconfig.Settings, cdi map[string][]string) error {
	inv := lc.poller.Inventory()
	for _, g := range inv.Groups(keys) {
		conf := lc.confs[g.Conf]
		raw, err := settings.Apply(conf.Plugin, conf.Raw)
		if err != nil {
			return fmt.Errorf("%s: %w", conf.File, err)
		}
		conf.Raw = raw
		added, err := lc.caller.AddDevices(ctx, conf, uid, request.Spec{Type: lc.typ}, unitSlots(inv.Units(g.Keys), held))
		if err != nil {
			return err
		}
		names, byKey := added.CDIDevices, added.CDIKeyDevices
		if len(names) == 0 {
			return errors.New("the plugins' ADD answers name no CDI devices; give their configs a cdi_spec arg, or none at all")
		}
		for _, k := range g.Keys {
			if id, ok := byKey[inv.UnitOf(k)]; ok { // a share device's is its unit's
				cdi[k] = []string{id}
			} else {
				cdi[k] = names
			}
		}
	}
	return nil
}

// UnprepareResourceClaims unprepares the claims the kubelet sends: DEL of each
// claim's UID. It succeeds once nothing is held under the UID, so the
// kubelet's retries are harmless.
func (lc *lifecycle) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = lc.unprepare(ctx, c)
	}
	return out, nil
}

func (lc *lifecycle) unprepare(ctx context.Context, c kubeletplugin.NamespacedObject) error {
	start := time.Now()
	var held bool
	err := checkUID(string(c.UID))
	if err == nil {
		held, err = lc.release(ctx, string(c.UID))
	}
	lc.metrics.Unprepared(lc.name, err, time.Since(start))
	log := lc.log.With("claim", c.Namespace+"/"+c.Name, "uid", c.UID, "took", time.Since(start).Round(time.Millisecond))
	if err != nil {
		log.Error("unprepare failed", "err", err)
		lc.recordRefused(claimRef(c.Namespace, c.Name, c.UID), "Unprepare", err)
		return err
	}
	log.Info("unprepare", "held", held)
	if lc.status != nil {
		lc.status.set(claimStatus{namespace: c.Namespace, name: c.Name, uid: c.UID})
	}
	return nil
}

// claimed returns the claims recorded, and those whose prepare runs (as
// bare records: theirs are written after their ADDs, in pin). The
// preparing are taken before the records are read, so that a claim whose
// prepare ends in between is in the records.
func (lc *lifecycle) claimed(ctx context.Context) (claimstate.Claims, error) {
	lc.mu.Lock()
	preparing := slices.Collect(maps.Keys(lc.preparing))
	lc.mu.Unlock()
	claims, err := lc.records.Read(ctx)
	if err != nil {
		return nil, err
	}
	for _, uid := range preparing {
		if _, ok := claims[uid]; !ok {
			claims[uid] = claimstate.Claim{UID: uid}
		}
	}
	return claims, nil
}

// checkUID checks a claim UID at the boundary: it becomes the request-id
// of the plugins' ADD and DEL and part of spec file names, so only a valid
// request-id (ASCII letters, digits and hyphens, as the API server's UIDs
// are) goes further; a crafted one with "/" or ".." never reaches a path.
func checkUID(uid string) error {
	if err := request.ValidRequestID(uid); err != nil {
		return fmt.Errorf("claim UID %q: %w", uid, err)
	}
	return nil
}

// release sends DEL for uid to every config of the type, unless the
// claim's record says it holds nothing there (admin access only), removes
// the driver's own spec of its admin-access devices, then drops the
// claim's record. When that fails, the record stays, so that a retry or
// the stale-claim collector tries again. held reports whether any plugin held something under
// uid.
func (lc *lifecycle) release(ctx context.Context, uid string) (held bool, err error) {
	claims, err := lc.records.Read(ctx)
	if err != nil {
		return false, err
	}
	var errs []error
	if c, ok := claims[uid]; !ok || len(c.Keys) > 0 {
		for _, conf := range lc.confs {
			h, err := lc.caller.Del(ctx, conf, uid)
			held = held || h
			errs = append(errs, err)
		}
	}
	errs = append(errs, lc.removeAdminSpecs(uid))
	if err := errors.Join(errs...); err != nil {
		return held, err
	}
	err = lc.records.Update(ctx, func(cs claimstate.Claims) error {
		delete(cs, uid)
		return nil
	})
	return held, err
}
