package pool

import (
	"slices"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// publish writes the request's CDI spec with every node the request-id
// holds in this plugin, and an entry of its own for each device (see
// specDevices). The record is committed first: a crash in between
// leaves a record without a spec, which the next ADD replay rewrites, never
// a spec claiming free devices. If the spec cannot be written, the
// allocations this call made are taken back and their setup undone.
func (a *adder) publish() error {
	spec, c, st := a.pool.Spec.config(), a.call, a.st
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
	owner := a.pool.owner(st)
	// A container_edits mount whose host path is missing is refused, not
	// written for the runtime to fail on (or to bind an empty directory).
	err := spec.CheckHost(c.Env.HostRoot)
	if err == nil {
		err = spec.Write(owner, c.RequestID, nodes, devs)
	}
	if err == nil {
		a.pool.removeOrphans(st, c)
		return nil
	}
	rollback := st.Update(func(tx *store.Tx) error {
		cur, err := tx.Get(c.RequestID)
		if err != nil || cur == nil {
			return err
		}
		cur.Allocations = slices.DeleteFunc(cur.Allocations, a.fresh)
		return tx.Replace(cur)
	})
	a.undo()
	if rollback != nil {
		return protocol.Errorf(protocol.CodeSetup, "writing CDI spec %s: %v; taking the allocation back also failed: %v", spec.Path(owner, c.RequestID), err, rollback)
	}
	return protocol.Errorf(protocol.CodeSetup, "writing CDI spec %s: %w", spec.Path(owner, c.RequestID), err)
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
// removal. Other stores' files are never touched.
func (p Pool) removeOrphans(st *store.Store, c *skel.Call) {
	_ = st.View(func(tx *store.Tx) error {
		o := cdispec.Owner{Plugin: p.Name, Store: tx.ID()}
		ids, err := p.Spec.config().Orphans(o, func(id string) bool {
			r, err := tx.Get(id)
			return err != nil || r != nil
		})
		if err != nil {
			c.Warnf("looking for orphaned CDI specs: %v", err)
		}
		for _, id := range ids {
			if err := p.Spec.config().Remove(o, id); err != nil {
				c.Warnf("removing orphaned CDI spec: %v", err)
			}
		}
		return nil
	})
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
