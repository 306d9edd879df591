package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// publish puts the request's CDI spec in place with every node the
// request-id holds in this plugin, and an entry of its own for each
// device (see specDevices); settle makes it durable once the store's
// lock is released. The record is committed first: a crash in between
// leaves a record without a spec (or, before settle, with one that may be
// empty or torn after the reboot), which the next ADD replay rewrites,
// never a spec claiming free devices. If the spec cannot be written, the
// allocations this call made are taken back and their setup undone.
func (a *adder) publish(pub *cdispec.Publication) error {
	spec, c := a.pool.Spec.config(), a.call
	allocs := make([]store.Allocation, len(a.rec.Allocations))
	for i, al := range a.rec.Allocations {
		allocs[i] = a.current(al) // a replay publishes the nodes it answers
	}
	var nodes []cdispec.Node
	perms := a.pool.permissions(allocs)
	for _, al := range allocs {
		for _, path := range al.HandedOut() {
			n := cdispec.Stat(c.Env.HostRoot, path)
			n.Permissions = perms[path]
			nodes = append(nodes, n)
		}
	}
	devs := specDevices(c.Env.HostRoot, allocs)
	for i := range devs {
		for j := range devs[i].Nodes {
			devs[i].Nodes[j].Permissions = perms[devs[i].Nodes[j].Path]
		}
	}
	// A container_edits mount whose host path is missing is refused, not
	// written for the runtime to fail on (or to bind an empty directory).
	err := spec.CheckHost(c.Env.HostRoot)
	if err == nil {
		err = pub.Write(a.owner, c.RequestID, nodes, devs)
	}
	if err == nil {
		return nil
	}
	return a.takeBack(err)
}

// settle makes the published spec durable after the store's lock is
// released and before the answer (cdispec.Publication.Sync): fsyncs of
// the file and the directory, and a last look for another store's file
// of the request-id. If that fails, the ADD fails with 107 once it has
// taken back, in a new hold of the store, what publish takes back when
// the write fails: the spec, then the allocations this call made, then
// their setup. It does so only while the spec is still the one it wrote:
// a DEL, GC or ADD of the request-id that ran in between has decided the
// record and the file since, and what it decided stays.
func (a *adder) settle(ctx context.Context, pub *cdispec.Publication) error {
	err := pub.Sync()
	if err == nil {
		return nil
	}
	// A replay that made nothing keeps the spec it renamed into place: it
	// names what the record holds, as the file it replaced did, and
	// withdrawing it would leave the id with no spec at all. Another
	// store's file of the id is the exception: both never keep theirs.
	if !slices.ContainsFunc(a.held, func(h answer) bool { return h.fresh }) && !errors.Is(err, cdispec.ErrForeign) {
		return a.specError(err, errors.New("the allocation and its spec stay, as a replay of what the request-id holds"))
	}
	s, oerr := a.pool.begin(ctx, a.call, store.Options{Existing: true})
	if oerr != nil {
		return a.specError(err, fmt.Errorf("the allocation stays: %w", oerr))
	}
	defer s.end()
	a.session = s
	ours, werr := pub.Withdraw()
	switch {
	case werr != nil:
		return a.specError(err, fmt.Errorf("the allocation stays: removing the spec: %w", werr))
	case !ours:
		return a.specError(err, errors.New("the allocation stays: a later command of the request-id replaced or removed the spec"))
	}
	return a.takeBack(err)
}

// takeBack takes back, in the session's transaction, the allocations
// this call made and undoes their setup, after its spec could not be
// written (cause); the answer is 107.
func (a *adder) takeBack(cause error) error {
	c := a.call
	took := false // the record held allocations of this call, now removed
	rollback := a.st.Update(func(tx *store.Tx) error {
		cur, err := tx.Get(c.RequestID)
		if err != nil || cur == nil {
			return err
		}
		n := len(cur.Allocations)
		cur.Allocations = slices.DeleteFunc(cur.Allocations, a.fresh)
		took = len(cur.Allocations) < n
		return tx.Replace(cur)
	})
	// The setup goes with the allocations, and only with them: a record a
	// DEL removed meanwhile may have let a later ADD set the devices up.
	if took && rollback == nil {
		a.undo()
	}
	if rollback != nil {
		rollback = fmt.Errorf("taking the allocation back also failed: %w", rollback)
	}
	return a.specError(cause, rollback)
}

// specError is the 107 of a spec that could not be written (cause), with
// what became of the allocation when that went wrong too (also).
func (a *adder) specError(cause, also error) error {
	path := a.pool.Spec.config().Path(a.owner, a.call.RequestID)
	if also != nil {
		return protocol.Errorf(protocol.CodeSetup, "writing CDI spec %s: %v; %v", path, cause, also)
	}
	return protocol.Errorf(protocol.CodeSetup, "writing CDI spec %s: %w", path, cause)
}

// specDevices are the devices of a request's allocations with the nodes
// of each one's own spec entry. An allocation whose node list is its
// devices' (no Allocation.Nodes) gives each device its nodes. One with a
// list of its own (shared nodes such as /dev/kfd after the devices' own,
// or a Handout's nodes) gives each device those of its nodes the list
// has, then every node of the list that is no device's: a shared node
// goes with each device, and a Handout's nodes, which belong to no single
// device, with all of them.
func specDevices(root string, allocs []store.Allocation) []cdispec.Device {
	var out []cdispec.Device
	for _, al := range allocs {
		var unowned []string
		if al.Nodes != nil {
			owned := map[string]bool{}
			for _, d := range al.Devices {
				for _, n := range d.Nodes {
					owned[n] = true
				}
			}
			for _, n := range al.Nodes {
				if !owned[n] {
					unowned = append(unowned, n)
				}
			}
		}
		for _, d := range al.Devices {
			// Shares of one device (Unit) have one entry, named by it.
			key := Unit(d.Key)
			if slices.ContainsFunc(out, func(o cdispec.Device) bool { return o.Key == key }) {
				continue
			}
			var paths []string
			for _, n := range d.Nodes {
				if al.Nodes == nil || slices.Contains(al.Nodes, n) {
					paths = append(paths, n)
				}
			}
			dev := cdispec.Device{Key: key}
			for _, path := range append(paths, unowned...) {
				dev.Nodes = append(dev.Nodes, cdispec.Stat(root, path))
			}
			out = append(out, dev)
		}
	}
	return out
}

// permissions are the CDI permissions of the allocations' nodes, by
// path, from the plugin's Permitter; nil without one.
func (p Pool) permissions(allocs []store.Allocation) map[string]string {
	if p.Permitter == nil {
		return nil
	}
	out := map[string]string{}
	for _, al := range allocs {
		for _, d := range al.Devices {
			if perm := p.Permitter.Permissions(d.Key); perm != "" {
				for _, n := range d.Nodes {
					out[n] = perm
				}
			}
		}
	}
	return out
}

// fresh reports whether this ADD made al (rather than replayed it).
func (a *adder) fresh(al store.Allocation) bool {
	return slices.ContainsFunc(a.held, func(h answer) bool { return h.fresh && h.Spec == al.Spec })
}

// owner names this plugin's store as the owner of the spec files it
// writes (docs/cdi-bridge.md#ownership).
func (p Pool) owner(st *store.Store) cdispec.Owner {
	o := cdispec.Owner{Plugin: p.Name}
	_ = st.View(func(tx *store.Tx) error { o.Store = tx.ID(); return nil })
	return o
}

// removeOrphans deletes the store's own spec files whose request-id holds
// nothing in it: left by a crash between a DEL's commit and its file
// removal. Other stores' files are never touched. GC looks for them in a
// transaction of its own.
func (p Pool) removeOrphans(st *store.Store, c *skel.Call) {
	_ = st.View(func(tx *store.Tx) error {
		o := cdispec.Owner{Plugin: p.Name, Store: tx.ID()}
		ids, err := p.Spec.config().Orphans(o, held(tx))
		p.removeEach(c, o, ids, err)
		return nil
	})
}

// removeOrphans is Pool.removeOrphans in ADD's transaction, from the
// listing of the spec directory that publish uses too.
func (a *adder) removeOrphans(tx *store.Tx, pub *cdispec.Publication) {
	ids, err := pub.Orphans(a.owner, held(tx))
	a.pool.removeEach(a.call, a.owner, ids, err)
}

// held reports whether a request-id holds something in tx; when its
// record cannot be read, it is taken as held.
func held(tx *store.Tx) func(id string) bool {
	return func(id string) bool {
		r, err := tx.Get(id)
		return err != nil || r != nil
	}
}

// removeEach removes o's orphaned spec files of ids, as found with err.
func (p Pool) removeEach(c *skel.Call, o cdispec.Owner, ids []string, err error) {
	if err != nil {
		c.Warnf("looking for orphaned CDI specs: %v", err)
	}
	for _, id := range ids {
		if err := p.Spec.config().Remove(o, id); err != nil {
			c.Warnf("removing orphaned CDI spec: %v", err)
		}
	}
}

// unpublish removes the store's own spec file of a request, if specs are
// published.
func (p Pool) unpublish(st *store.Store, c *skel.Call, id string) {
	if p.Spec != nil {
		p.removeSpec(c, p.owner(st), id)
	}
}

// removeSpec removes o's spec file of a request; specs are published.
func (p Pool) removeSpec(c *skel.Call, o cdispec.Owner, id string) {
	if err := p.Spec.config().Remove(o, id); err != nil {
		c.Warnf("removing CDI spec: %v", err)
	}
}
