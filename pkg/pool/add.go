package pool

import (
	"context"
	"slices"

	"github.com/cdi-exec/plugins/pkg/abnf"
	"github.com/cdi-exec/plugins/pkg/alloc"
	"github.com/cdi-exec/plugins/pkg/cdispec"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
	"github.com/cdi-exec/plugins/pkg/store"
)

// Add allocates the request in one store transaction, or replays an earlier
// identical allocation, then publishes the request's CDI spec when the
// config asks for one. Discovery, the choice, the setup hooks and the
// resolution of node names all run inside the transaction, under the
// store's lock, bounded by HoldLimit.
func (p Pool) Add(ctx context.Context, c *skel.Call) (*skel.AddResult, error) {
	st, hold, work, done, err := p.lock(ctx, c, store.Options{})
	if err != nil {
		return nil, err
	}
	defer done()

	a := &adder{pool: p, call: c, pick: byCount(c.Locality, p.Strict, distances(c))}
	if c.Pinned != nil {
		a.pick = byKeys(c.Pinned, func(key string) string { return p.unusable(work, c, key) })
	}
	if err := st.Update(func(tx *store.Tx) error { return a.run(work, tx) }); err != nil {
		a.undo(hold)
		return nil, storeError(err)
	}
	res := a.result()
	if p.Spec != nil {
		if err := a.publish(hold, st); err != nil {
			return nil, err
		}
		res.CDIDevices = []string{p.Spec.QualifiedName(c.RequestID)}
		res.CDIKeyDevices = p.Spec.QualifiedKeyNames(c.RequestID, specDevices(c.Env.HostRoot, a.rec.Allocations))
	}
	return res, nil
}

// adder is the state of one ADD: what it found, chose and set up.
type adder struct {
	pool   Pool
	call   *skel.Call
	pick   picker
	holder func(key string) string // the store's index, in the transaction

	devs      []Device          // devices discovered, in discovery order
	present   map[string]Device // the same, by key
	rescanned bool              // discovery read the host again after a failed live check
	held      []answer          // per request item, in request order
	undos     []func(context.Context)
	rec       store.Record // the request's record after this call
}

// answer is an allocation an ADD answers with, marked fresh when this
// call made it (its nodes were just resolved).
type answer struct {
	store.Allocation
	fresh bool
}

// run is the body of ADD's transaction. bbolt runs it once; an error rolls
// everything back.
func (a *adder) run(ctx context.Context, tx *store.Tx) error {
	a.holder = tx.Holder
	if err := a.discover(ctx, false); err != nil {
		return err
	}
	rec, err := tx.Get(a.call.RequestID)
	if err != nil {
		return err
	}
	if rec == nil {
		rec = &store.Record{ID: a.call.RequestID, Type: a.call.Config.Type}
		// A spec for an id that holds nothing is stale (a DEL killed
		// before removing it). Remove it before committing, so that an
		// ADD killed before its own spec write leaves no spec at all,
		// never one naming devices the id does not hold.
		if a.pool.Spec != nil {
			a.pool.removeSpec(a.call, cdispec.Owner{Plugin: a.pool.Name, Store: tx.ID()}, a.call.RequestID)
		}
	}
	taken := map[string]bool{} // by earlier items of this request
	free := func(key string) bool { return !taken[key] && tx.Holder(key) == "" }
	changed := false
	for _, item := range a.call.Request.Items {
		if old := rec.Find(item.Spec.String()); old != nil {
			if err := a.replay(*old, item); err != nil {
				return err
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return protocol.Errorf(protocol.CodeInternal, "ADD ran out of time holding the store: %w", err)
		}
		al, err := a.allocate(ctx, item, free)
		if err != nil {
			return err
		}
		for _, d := range al.Devices {
			taken[d.Key] = true
		}
		rec.Allocations = append(rec.Allocations, al)
		a.held = append(a.held, answer{al, true})
		changed = true
	}
	a.rec = *rec
	if !changed {
		return nil
	}
	return tx.Put(rec)
}

// discover discovers the devices, or prepares them (sriov), inside the
// transaction. Devices held by other requests may be left out; this
// request's own are scanned so that a replay reports their current names.
// rescan asks discovery to read the host rather than a cache.
func (a *adder) discover(ctx context.Context, rescan bool) error {
	scan := Scan{NUMA: true, Holder: a.holder, RequestID: a.call.RequestID, Rescan: rescan}
	var devs []Device
	var err error
	if a.pool.Prepare != nil {
		devs, err = a.pool.Prepare(ctx, a.call, scan)
	} else {
		devs, err = a.pool.discover(ctx, a.call, scan)
	}
	if err != nil {
		return err
	}
	devs = a.pool.placed(ctx, a.call, devs)
	a.devs = devs
	a.present = make(map[string]Device, len(devs))
	for _, d := range devs {
		a.present[d.Key] = d
	}
	return nil
}

// replay answers an item the request already holds, which must be asked
// for again unchanged (else 104): the same amount and, for a pinned ADD,
// the same devices.
func (a *adder) replay(old store.Allocation, item abnf.Item) error {
	if old.Amount != item.Amount {
		return protocol.Errorf(protocol.CodeConflict, "request %q already holds %d of %s; asked for %d",
			a.call.RequestID, old.Amount, old.Spec, item.Amount)
	}
	if a.call.Pinned != nil {
		if err := samePinned(a.call.RequestID, old, a.call.Pinned); err != nil {
			return err
		}
	}
	a.held = append(a.held, answer{old, false})
	return nil
}

// undo takes back the setup of a failed ADD, newest first.
func (a *adder) undo(ctx context.Context) {
	for i := len(a.undos) - 1; i >= 0; i-- {
		a.undos[i](ctx)
	}
}

// result renders the answer: the nodes item by item, and the NUMA nodes of
// every device held.
func (a *adder) result() *skel.AddResult {
	res := &skel.AddResult{Devices: []string{}}
	for _, h := range a.held {
		for _, d := range h.Devices {
			if d.NUMA != alloc.Unknown && !slices.Contains(res.NUMA, d.NUMA) {
				res.NUMA = append(res.NUMA, d.NUMA)
			}
		}
		res.Devices = append(res.Devices, a.nodes(h)...)
	}
	slices.Sort(res.NUMA)
	return res
}

// nodes returns what an allocation hands out now. A replayed device's
// node names are read again from the host, as they may have moved since
// the record was made; a device that has gone keeps its recorded ones.
func (a *adder) nodes(h answer) []string {
	if h.Nodes != nil {
		return h.Nodes
	}
	var out []string
	for _, d := range h.Devices {
		nodes := d.Nodes
		if now, ok := a.present[d.Key]; ok && !h.fresh {
			// Node names may have moved since the record was made.
			if resolved, err := now.nodes(); err == nil {
				nodes = resolved
			}
		}
		out = append(out, nodes...)
	}
	return out
}
