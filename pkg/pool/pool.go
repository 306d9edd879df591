// Package pool implements the commands shared by plugins that hand out whole
// devices exclusively: count them for INFO, choose and record them for ADD,
// free them for DEL and GC. A plugin supplies discovery; pool owns the store
// transaction and the mapping of failures to protocol codes.
package pool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/cdi-exec/plugins/pkg/abnf"
	"github.com/cdi-exec/plugins/pkg/alloc"
	"github.com/cdi-exec/plugins/pkg/cdispec"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
	"github.com/cdi-exec/plugins/pkg/store"
)

// Device is a usable device present on the host.
type Device struct {
	Key   string   // stable identity across reboots (PCI address, tty name)
	Index int      // preference order; lower first
	NUMA  int      // NUMA node or alloc.Unknown
	Nodes []string // container-facing device node paths, in handout order
	// Resolve, when set, returns the final node paths of a device that is
	// being handed out; discovery checks nodes by their conventional names
	// and leaves the per-device reads to the few devices chosen.
	Resolve func() []string
}

// nodes returns the device's final node paths.
func (d Device) nodes() []string {
	if d.Resolve != nil {
		return d.Resolve()
	}
	return d.Nodes
}

// Pool runs the exclusive-allocation commands for one plugin invocation.
// It implements skel.Plugin (and GC and DEVICES), so a plugin embeds it and
// supplies discovery.
type Pool struct {
	// Name is the plugin's binary name; the store is <Name>.db.
	Name string
	Call *skel.Call
	// Spec, when set, publishes allocations as CDI spec files (the
	// cdi_spec arg, docs/cdi-bridge.md).
	Spec *cdispec.Config
	// Strict makes a requested NUMA locality mandatory (code 105).
	Strict bool
	// Discover returns the usable devices present now, in any order.
	Discover func(Scan) ([]Device, error)

	// Hooks for plugins that set devices up (sriov); all optional.

	// Prepare replaces Discover for ADD. It runs inside ADD's store
	// transaction, while the plugin holds its store's lock, so it may
	// change the host (create VFs) knowing what is allocated.
	Prepare func(tx *store.Tx) ([]Device, error)
	// Handout turns the devices chosen for one request item into the
	// nodes handed out, with an undo that ADD calls if it fails later.
	Handout func(item abnf.Item, chosen []Device) (h Handout, err error)
	// Teardown runs before a record is deleted by DEL or GC. Its error is
	// reported, and the record is deleted anyway.
	Teardown func(rec *store.Record) error
	// Inventory lists every device the plugin sees, usable or not, for
	// the DEVICES extension.
	Inventory func() ([]protocol.DeviceInfo, error)
}

// Scan tells Discover what the command needs.
type Scan struct {
	// NUMA asks for the NUMA node of every device returned (ADD).
	NUMA bool
	// Skip, when set, names devices that need no checks because another
	// request holds them: ADD scans inside its store transaction and
	// passes the store's index, so that on a busy node only the devices
	// that could be chosen pay for attribute reads.
	Skip func(key string) bool
}

// Skipped reports whether the scan may leave key out.
func (s Scan) Skipped(key string) bool { return s.Skip != nil && s.Skip(key) }

// Handout is what a Handout hook produced for one request item.
type Handout struct {
	Nodes    []string
	Delegate string // plugin chain-loaded, recorded for DEL
	Undo     func()
}

// Devices answers the DEVICES extension: the inventory, with the holder
// of each device read from the store (read-only, bounded wait).
func (p Pool) Devices(context.Context, *skel.Call) ([]protocol.DeviceInfo, error) {
	if p.Inventory == nil {
		return nil, protocol.NewError(protocol.CodeCommandUnsupported, "Unsupported command: DEVICES")
	}
	devs, err := p.Inventory()
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "discovering devices under %s: %w", p.Call.Env.HostRoot, err)
	}
	st, err := Open(p.Name, p.Call, true)
	var e *protocol.Error
	if errors.As(err, &e) && errors.Is(err, store.ErrNotExist) {
		return devs, nil
	}
	if err != nil {
		return nil, err
	}
	defer st.Close()
	err = st.View(func(tx *store.Tx) error {
		for i := range devs {
			devs[i].HeldBy = tx.Holder(devs[i].Key)
		}
		return nil
	})
	if err != nil {
		return nil, storeError(err)
	}
	return devs, nil
}

// StrictNUMA parses a numa_policy arg: "" or "preferred" (false), or
// "strict" (true).
func StrictNUMA(policy string) (bool, error) {
	switch policy {
	case "", "preferred":
		return false, nil
	case "strict":
		return true, nil
	}
	return false, fmt.Errorf("numa_policy: %q is neither \"preferred\" nor \"strict\"", policy)
}

// Info counts the usable devices: the node's allocatable capacity.
func (p Pool) Info(context.Context, *skel.Call) (map[string]int, error) {
	devs, err := p.discover(Scan{})
	if err != nil {
		return nil, err
	}
	return map[string]int{p.Call.Config.Type: len(devs)}, nil
}

func (p Pool) discover(scan Scan) ([]Device, error) {
	devs, err := p.Discover(scan)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "discovering devices under %s: %w", p.Call.Env.HostRoot, err)
	}
	return devs, nil
}

// Open opens the plugin's store and maps failures to code 106.
func Open(name string, c *skel.Call, readOnly bool) (*store.Store, error) {
	st, err := store.Open(store.Path(c.Env.StateDir, name), store.Options{Timeout: c.Env.LockTimeout, ReadOnly: readOnly})
	if err != nil {
		return nil, storeError(err)
	}
	return st, nil
}

func storeError(err error) error {
	var e *protocol.Error
	switch {
	case errors.As(err, &e):
		return err
	case errors.Is(err, store.ErrBusy):
		return protocol.Errorf(protocol.CodeStore, "another invocation holds the allocation store; try again: %w", err)
	case errors.Is(err, store.ErrCorrupt):
		return protocol.Errorf(protocol.CodeStore, "the allocation store cannot be read and was left untouched for inspection: %w", err)
	}
	return protocol.Errorf(protocol.CodeStore, "%w", err)
}

// answer is an allocation an ADD answers with, marked fresh when this
// call made it (its nodes were just resolved).
type answer struct {
	store.Allocation
	fresh bool
}

// Add allocates the request in one store transaction, or replays an earlier
// identical allocation.
func (p Pool) Add(context.Context, *skel.Call) (*skel.AddResult, error) {
	var devs []Device
	st, err := Open(p.Name, p.Call, false)
	if err != nil {
		return nil, err
	}
	defer st.Close()

	c := p.Call
	var held []answer
	var undo []func()
	var final store.Record // the request's record after this call
	present := map[string]Device{}
	err = st.Update(func(tx *store.Tx) error {
		held = held[:0]
		var err error
		if p.Prepare != nil {
			devs, err = p.Prepare(tx)
		} else {
			// Devices held by other requests cannot be chosen; this one's
			// own are scanned so a replay reports their current names.
			devs, err = p.discover(Scan{NUMA: true, Skip: func(key string) bool {
				h := tx.Holder(key)
				return h != "" && h != c.RequestID
			}})
		}
		if err != nil {
			return err
		}
		clear(present)
		for _, d := range devs {
			present[d.Key] = d
		}
		rec, err := tx.Get(c.RequestID)
		if err != nil {
			return err
		}
		if rec == nil {
			rec = &store.Record{ID: c.RequestID, Type: c.Config.Type}
		}
		changed := false
		taken := map[string]bool{}
		for _, item := range c.Request.Items {
			spec := item.Spec.String()
			if a := rec.Find(spec); a != nil {
				if a.Amount != item.Amount {
					return protocol.Errorf(protocol.CodeConflict, "request %q already holds %d of %s; asked for %d", c.RequestID, a.Amount, spec, item.Amount)
				}
				held = append(held, answer{*a, false})
				continue
			}
			var free []Device
			var cands []alloc.Candidate
			for _, d := range devs {
				if !taken[d.Key] && tx.Holder(d.Key) == "" {
					free = append(free, d)
					cands = append(cands, alloc.Candidate{Index: d.Index, NUMA: d.NUMA})
				}
			}
			pos, err := alloc.Choose(cands, item.Amount, c.Locality, p.Strict)
			switch {
			case errors.Is(err, alloc.ErrInsufficient):
				return protocol.Errorf(protocol.CodeInsufficient, "%s: %v", spec, err)
			case errors.Is(err, alloc.ErrLocality):
				return protocol.Errorf(protocol.CodeNUMA, "%s: %v (numa_policy is strict)", spec, err)
			case err != nil:
				return err
			}
			a := store.Allocation{Spec: spec, Amount: item.Amount, Created: time.Now().UTC()}
			chosen := make([]Device, len(pos))
			for j, i := range pos {
				chosen[j] = free[i]
				taken[free[i].Key] = true
			}
			if p.Handout != nil {
				h, err := p.Handout(item, chosen)
				if err != nil {
					return err
				}
				a.Nodes, a.Delegate = protocol.NonNil(h.Nodes), h.Delegate
				if h.Undo != nil {
					undo = append(undo, h.Undo)
				}
			}
			for _, d := range chosen {
				nodes := d.Nodes
				if p.Handout == nil {
					nodes = d.nodes()
				}
				a.Devices = append(a.Devices, store.Device{Key: d.Key, Nodes: nodes, NUMA: d.NUMA})
			}
			rec.Allocations = append(rec.Allocations, a)
			held = append(held, answer{a, true})
			changed = true
		}
		final = *rec
		if !changed {
			return nil
		}
		return tx.Put(rec)
	})
	if err != nil {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return nil, storeError(err)
	}

	res := &skel.AddResult{Devices: []string{}}
	for _, a := range held {
		for _, d := range a.Devices {
			res.NUMA = appendNode(res.NUMA, d.NUMA)
		}
		if a.Nodes != nil {
			res.Devices = append(res.Devices, a.Nodes...)
			continue
		}
		for _, d := range a.Devices {
			nodes := d.Nodes
			if now, ok := present[d.Key]; ok && !a.fresh {
				nodes = now.nodes() // node names may have moved since the record was made
			}
			res.Devices = append(res.Devices, nodes...)
		}
	}
	slices.Sort(res.NUMA)
	if p.Spec != nil {
		if err := p.publish(st, &final, held, undo); err != nil {
			return nil, err
		}
		res.CDIDevices = []string{p.Spec.QualifiedName(c.RequestID)}
	}
	return res, nil
}

// publish writes the request's CDI spec with every node the request-id
// holds in this plugin. The record is committed first: a crash in between
// leaves a record without a spec, which the next ADD replay rewrites, never
// a spec claiming free devices. If the spec cannot be written, the
// allocations this call made are taken back and their setup undone.
func (p Pool) publish(st *store.Store, rec *store.Record, held []answer, undo []func()) error {
	c := p.Call
	var nodes []cdispec.Node
	for _, a := range rec.Allocations {
		for _, path := range a.HandedOut() {
			nodes = append(nodes, cdispec.Stat(c.Env.HostRoot, path))
		}
	}
	err := p.Spec.Write(c.RequestID, nodes)
	if err == nil {
		p.removeOrphans(st)
		return nil
	}
	rollback := st.Update(func(tx *store.Tx) error {
		cur, err := tx.Get(c.RequestID)
		if err != nil || cur == nil {
			return err
		}
		cur.Allocations = slices.DeleteFunc(cur.Allocations, func(a store.Allocation) bool {
			return slices.ContainsFunc(held, func(h answer) bool { return h.fresh && h.Spec == a.Spec })
		})
		return tx.Replace(cur)
	})
	for i := len(undo) - 1; i >= 0; i-- {
		undo[i]()
	}
	if rollback != nil {
		return protocol.Errorf(protocol.CodeSetup, "writing CDI spec %s: %v; taking the allocation back also failed: %v", p.Spec.Path(c.RequestID), err, rollback)
	}
	return protocol.Errorf(protocol.CodeSetup, "writing CDI spec %s: %w", p.Spec.Path(c.RequestID), err)
}

// removeOrphans deletes spec files whose request-id holds nothing in the
// store: left by a crash between a DEL's commit and its file removal.
func (p Pool) removeOrphans(st *store.Store) {
	spec := p.Spec
	_ = st.View(func(tx *store.Tx) error {
		ids, err := spec.Orphans(func(id string) bool {
			r, err := tx.Get(id)
			return err != nil || r != nil
		})
		if err != nil {
			p.Call.Warnf("looking for orphaned CDI specs: %v", err)
		}
		for _, id := range ids {
			if err := spec.Remove(id); err != nil {
				p.Call.Warnf("removing orphaned CDI spec: %v", err)
			}
		}
		return nil
	})
}

// unpublish removes a request's spec file, if specs are published.
func (p Pool) unpublish(id string) {
	if p.Spec == nil {
		return
	}
	if err := p.Spec.Remove(id); err != nil {
		p.Call.Warnf("removing CDI spec: %v", err)
	}
}

func appendNode(nodes []int, n int) []int {
	if n == alloc.Unknown || slices.Contains(nodes, n) {
		return nodes
	}
	return append(nodes, n)
}

// Del frees everything the request-id holds, in one transaction.
func (p Pool) Del(context.Context, *skel.Call) error {
	path := store.Path(p.Call.Env.StateDir, p.Name)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		p.unpublish(p.Call.RequestID) // an orphan, if anything
		return protocol.NewError(protocol.CodeUnknownRequestID, "")
	}
	st, err := Open(p.Name, p.Call, false)
	if err != nil {
		return err
	}
	defer st.Close()
	var teardownErr error
	err = st.Update(func(tx *store.Tx) error {
		rec, err := tx.Get(p.Call.RequestID)
		if err != nil {
			return err
		}
		if rec == nil {
			return protocol.NewError(protocol.CodeUnknownRequestID, "")
		}
		if p.Teardown != nil {
			teardownErr = p.Teardown(rec)
		}
		_, err = tx.Delete(p.Call.RequestID)
		return err
	})
	var e *protocol.Error
	if err == nil || errors.As(err, &e) && e.Code == protocol.CodeUnknownRequestID {
		p.unpublish(p.Call.RequestID)
	}
	if err != nil {
		return storeError(err)
	}
	return teardownErr
}

// GC frees every allocation whose request-id is not in the call's valid set.
func (p Pool) GC(context.Context, *skel.Call) (*skel.GCResult, error) {
	res := &skel.GCResult{Freed: []string{}}
	path := store.Path(p.Call.Env.StateDir, p.Name)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return res, nil
	}
	st, err := Open(p.Name, p.Call, false)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	err = st.Update(func(tx *store.Tx) error {
		res.Freed, res.Errors = res.Freed[:0], nil
		var stale []string
		err := tx.ForEach(func(r *store.Record) error {
			if !p.Call.ValidIDs[r.ID] {
				stale = append(stale, r.ID)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, id := range stale {
			if p.Teardown != nil {
				rec, err := tx.Get(id)
				if err != nil {
					return err
				}
				if err := p.Teardown(rec); err != nil {
					res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", id, err))
				}
			}
			if _, err := tx.Delete(id); err != nil {
				return fmt.Errorf("freeing %q: %w", id, err)
			}
			res.Freed = append(res.Freed, id)
		}
		return nil
	})
	if err != nil {
		return nil, storeError(err)
	}
	for _, id := range res.Freed {
		p.unpublish(id)
	}
	if p.Spec != nil {
		p.removeOrphans(st)
	}
	return res, nil
}
