package pool

import (
	"context"
	"slices"

	"github.com/cdi-exec/plugins/internal/alloc"
	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// Add allocates the request in one store transaction, or replays an earlier
// identical allocation, then publishes the request's CDI spec when the
// config asks for one. It reads as ADD runs:
//
//  0. refuse a cdi_spec whose hooks anyone but root could replace
//     (CheckHooks, 101), before the store is touched; with a cdi_spec,
//     open the spec directory and make the spec's file, unnamed
//     (cdispec.Config.Stage), so that its inode is not made under the lock;
//  1. open the store, which takes its lock, and start the deadlines of the
//     hold (Pool.begin);
//  2. discover the usable devices, inside the transaction (adder.discover);
//  3. choose the devices of each request item not held yet
//     (adder.allocate, choose.go);
//  4. verify the chosen devices live, discovering again once if one
//     fails (adder.choose), or set them up (Setup.Handout);
//  5. put the record and remove the store's orphaned spec files (one
//     listing of the spec directory, adder.removeOrphans), committed
//     with the transaction;
//  6. put the CDI spec in place, renamed over the old one, from the same
//     listing (adder.publish, publish.go), and release the lock;
//  7. make the spec durable (fsync of the file and the directory) before
//     the answer, or take the allocation back (adder.settle).
//
// A failure anywhere rolls the transaction back and undoes the setup.
func (p Pool) Add(ctx context.Context, c *skel.Call) (*skel.AddResult, error) {
	if err := p.CheckHooks(c); err != nil {
		return nil, err
	}
	var pub *cdispec.Publication
	if p.Spec != nil {
		pub = p.Spec.config().Stage()
		defer pub.Close()
	}
	a, res, err := p.add(ctx, c, pub)
	if err != nil || pub == nil {
		return res, err
	}
	if err := a.settle(ctx, pub); err != nil {
		return nil, err
	}
	return res, nil
}

// add is ADD while it holds the store's lock: steps 1 to 6.
func (p Pool) add(ctx context.Context, c *skel.Call, pub *cdispec.Publication) (*adder, *skel.AddResult, error) {
	s, err := p.begin(ctx, c, store.Options{})
	if err != nil {
		return nil, nil, err
	}
	defer s.end()
	a := p.adder(s)
	err = s.st.Update(func(tx *store.Tx) error {
		a.holder = tx.Holder
		a.owner = cdispec.Owner{Plugin: p.Name, Store: tx.ID()}
		rec, err := a.record(tx)
		if err != nil {
			return err
		}
		a.own = keys(rec)
		if err := a.discover(false); err != nil {
			return err
		}
		// A record made without an owner (before owners were kept) takes
		// the first one an ADD of its id names; a recorded owner stays.
		changed := false
		if rec.Owner == "" && c.Owner != "" {
			rec.Owner, changed = c.Owner, true
		}
		for _, item := range c.Request.Items {
			if old := rec.Find(item.Spec.String()); old != nil {
				if err := a.replay(*old, item); err != nil {
					return err
				}
				continue
			}
			al, err := a.allocate(item)
			if err != nil {
				return err
			}
			rec.Allocations = append(rec.Allocations, al)
			changed = true
		}
		a.rec = *rec
		if changed {
			if err := tx.Put(rec); err != nil {
				return err
			}
		}
		if pub != nil {
			a.removeOrphans(tx, pub)
		}
		return nil
	})
	if err != nil {
		a.undo()
		return nil, nil, storeError(err)
	}
	res := a.result()
	if pub != nil {
		if err := a.publish(pub); err != nil {
			return nil, nil, err
		}
		res.CDIDevices = []string{p.Spec.config().QualifiedName(c.RequestID)}
		res.CDIKeyDevices = p.Spec.config().QualifiedKeyNames(c.RequestID, specDevices(c.Env.HostRoot, a.rec.Allocations))
	}
	return a, res, nil
}

// adder is the state of one ADD: what it found, chose and set up.
type adder struct {
	*session
	pool   Pool
	pick   picker
	holder func(key string) string // the store's index, in the transaction
	own    []string                // the keys the request holds (Scan.Own)

	devs      []Device          // devices discovered, in discovery order
	present   map[string]Device // the same, by key
	rescanned bool              // discovery read the host again after a failed live check
	taken     map[string]bool   // by earlier items of this request
	held      []answer          // per request item, in request order
	undos     []func(context.Context)
	rec       store.Record  // the request's record after this call
	owner     cdispec.Owner // of the spec files of the store (docs/cdi-bridge.md#ownership)
}

// adder starts an ADD in session s: it picks by count, or, for a pinned
// ADD, the devices the call names.
func (p Pool) adder(s *session) *adder {
	c := s.call
	a := &adder{session: s, pool: p, pick: byCount(c.Locality, p.Strict, distances(c)), taken: map[string]bool{}}
	if c.Pinned != nil {
		a.pick = byKeys(c.Pinned, func(key string) string { return p.unusable(s.work, c, key) })
	}
	return a
}

// answer is an allocation an ADD answers with, marked fresh when this
// call made it (its nodes were just resolved).
type answer struct {
	store.Allocation
	fresh bool
}

// record returns the request's record, or a new one. A spec for an id
// that holds nothing is stale (a DEL killed before removing it): it is
// removed before the commit, so that an ADD killed before its own spec
// write leaves no spec at all, never one naming devices the id does not
// hold.
func (a *adder) record(tx *store.Tx) (*store.Record, error) {
	rec, err := tx.Get(a.call.RequestID)
	if err != nil || rec != nil {
		return rec, err
	}
	if a.pool.Spec != nil {
		a.pool.removeSpec(a.call, a.owner, a.call.RequestID)
	}
	return &store.Record{ID: a.call.RequestID, Type: a.call.Config.Type, Owner: a.call.Owner}, nil
}

// free reports whether a device may be handed out: no request holds it
// and no earlier item of this request took it.
func (a *adder) free(key string) bool { return !a.taken[key] && a.holder(key) == "" }

// discover discovers the devices inside the transaction. Devices held by
// other requests may be left out; this request's own are scanned so that
// a replay reports their current names. rescan asks discovery to read the
// host rather than a cache.
func (a *adder) discover(rescan bool) error {
	scan := Scan{NUMA: true, Holder: a.holder, RequestID: a.call.RequestID, Rescan: rescan,
		Need: need(a.call.Request), Own: a.own}
	devs, err := a.pool.discover(a.work, a.call, scan)
	if err != nil {
		return err
	}
	devs = a.pool.placed(a.work, a.call, devs)
	a.devs = devs
	a.present = make(map[string]Device, len(devs))
	for _, d := range devs {
		a.present[d.Key] = d
	}
	return nil
}

// need is how many devices a request can take: the sum of its items'
// amounts.
func need(r request.Request) int {
	n := 0
	for _, it := range r.Items {
		n += it.Amount
	}
	return n
}

// keys are the device keys a record holds, nil for none.
func keys(rec *store.Record) []string {
	var out []string
	for _, d := range rec.Devices() {
		out = append(out, d.Key)
	}
	return out
}

// replay answers an item the request already holds, which must be asked
// for again unchanged (else 104): the same amount and, for a pinned ADD,
// the same devices.
func (a *adder) replay(old store.Allocation, item request.Item) error {
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

// undo takes back the setup of a failed ADD, newest first, within the
// hold's deadline.
func (a *adder) undo() {
	for i := len(a.undos) - 1; i >= 0; i-- {
		a.undos[i](a.hold)
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

// nodes returns what an allocation hands out now (current).
func (a *adder) nodes(h answer) []string {
	if h.fresh {
		return h.HandedOut()
	}
	cur := a.current(h.Allocation)
	return cur.HandedOut()
}

// current returns a replayed allocation with its nodes as they are now:
// a device's node names are read again from the host, as they may have
// moved since the record was made (renumbered DRM minors, a renumbered
// IOMMU group); a device that has gone keeps its recorded ones. An
// allocation with shared nodes (arrange) is read again only when every
// one of its devices is present and passes its check, and is then
// arranged again; else, and for a plugin's Handout, it stays as recorded.
// The ADD's answer and the spec it publishes both come from it.
func (a *adder) current(al store.Allocation) store.Allocation {
	replayed := slices.ContainsFunc(a.held, func(h answer) bool { return !h.fresh && h.Spec == al.Spec })
	if !replayed || a.pool.Setup != nil {
		return al
	}
	out := al
	out.Devices = slices.Clone(al.Devices)
	all := make([][]string, len(al.Devices))
	for i, d := range al.Devices {
		all[i] = d.Nodes
		now, ok := a.present[d.Key]
		if !ok {
			if al.Nodes != nil {
				return al
			}
			continue
		}
		resolved, err := now.nodes()
		if err != nil {
			if al.Nodes != nil {
				return al
			}
			continue
		}
		all[i] = slices.Clone(resolved)
	}
	if al.Nodes != nil {
		arranged := a.pool.arrange(all)
		if arranged == nil {
			return al
		}
		out.Nodes = arranged
	}
	for i := range out.Devices {
		out.Devices[i].Nodes = all[i]
	}
	return out
}
