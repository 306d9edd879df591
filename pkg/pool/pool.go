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

	"github.com/cdi-exec/plugins/pkg/alloc"
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
type Pool struct {
	// Name is the plugin's binary name; the store is <Name>.db.
	Name string
	Call *skel.Call
	// Strict makes a requested NUMA locality mandatory (code 105).
	Strict bool
	// Discover returns the usable devices present now, in any order. NUMA
	// nodes are needed only when forAdd is true.
	Discover func(forAdd bool) ([]Device, error)
}

// Info counts the usable devices: the node's allocatable capacity.
func (p Pool) Info(context.Context) (map[string]int, error) {
	devs, err := p.discover(false)
	if err != nil {
		return nil, err
	}
	return map[string]int{p.Call.Config.Type: len(devs)}, nil
}

func (p Pool) discover(forAdd bool) ([]Device, error) {
	devs, err := p.Discover(forAdd)
	if err != nil {
		return nil, skel.Errorf(skel.CodeInternal, "discovering devices under %s: %w", p.Call.Env.HostRoot, err)
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
	var e *skel.Error
	switch {
	case errors.As(err, &e):
		return err
	case errors.Is(err, store.ErrBusy):
		return skel.Errorf(skel.CodeStore, "another invocation holds the allocation store; try again: %w", err)
	case errors.Is(err, store.ErrCorrupt):
		return skel.Errorf(skel.CodeStore, "the allocation store cannot be read and was left untouched for inspection: %w", err)
	}
	return skel.Errorf(skel.CodeStore, "%w", err)
}

// Add allocates the request in one store transaction, or replays an earlier
// identical allocation.
func (p Pool) Add(ctx context.Context) (*skel.AddResult, error) {
	devs, err := p.discover(true)
	if err != nil {
		return nil, err
	}
	present := make(map[string]Device, len(devs))
	for _, d := range devs {
		present[d.Key] = d
	}
	st, err := Open(p.Name, p.Call, false)
	if err != nil {
		return nil, err
	}
	defer st.Close()

	c := p.Call
	var held []store.Device
	fresh := map[string]bool{} // devices allocated by this call, nodes already resolved
	err = st.Update(func(tx *store.Tx) error {
		held = held[:0]
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
					return skel.Errorf(skel.CodeConflict, "request %q already holds %d of %s; asked for %d", c.RequestID, a.Amount, spec, item.Amount)
				}
				held = append(held, a.Devices...)
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
				return skel.Errorf(skel.CodeInsufficient, "%s: %v (%d usable on this node)", spec, err, len(devs))
			case errors.Is(err, alloc.ErrLocality):
				return skel.Errorf(skel.CodeNUMA, "%s: %v (numa_policy is strict)", spec, err)
			case err != nil:
				return err
			}
			a := store.Allocation{Spec: spec, Amount: item.Amount, Created: time.Now().UTC()}
			for _, i := range pos {
				d := free[i]
				taken[d.Key] = true
				fresh[d.Key] = true
				a.Devices = append(a.Devices, store.Device{Key: d.Key, Nodes: d.nodes(), NUMA: d.NUMA})
			}
			rec.Allocations = append(rec.Allocations, a)
			held = append(held, a.Devices...)
			changed = true
		}
		if !changed {
			return nil
		}
		return tx.Put(rec)
	})
	if err != nil {
		return nil, storeError(err)
	}

	res := &skel.AddResult{Devices: []string{}}
	for _, d := range held {
		nodes := d.Nodes
		if now, ok := present[d.Key]; ok && !fresh[d.Key] {
			nodes = now.nodes() // node names may have moved since the record was made
		}
		res.Devices = append(res.Devices, nodes...)
		res.NUMA = appendNode(res.NUMA, d.NUMA)
	}
	slices.Sort(res.NUMA)
	return res, nil
}

func appendNode(nodes []int, n int) []int {
	if n == alloc.Unknown || slices.Contains(nodes, n) {
		return nodes
	}
	return append(nodes, n)
}

// Del frees everything the request-id holds, in one transaction.
func (p Pool) Del(context.Context) error {
	path := store.Path(p.Call.Env.StateDir, p.Name)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return skel.NewError(skel.CodeUnknownRequestID, "")
	}
	st, err := Open(p.Name, p.Call, false)
	if err != nil {
		return err
	}
	defer st.Close()
	err = st.Update(func(tx *store.Tx) error {
		rec, err := tx.Delete(p.Call.RequestID)
		if err != nil {
			return err
		}
		if rec == nil {
			return skel.NewError(skel.CodeUnknownRequestID, "")
		}
		return nil
	})
	if err != nil {
		return storeError(err)
	}
	return nil
}

// GC frees every allocation whose request-id is not in the call's valid set.
func (p Pool) GC(context.Context) (*skel.GCResult, error) {
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
		res.Freed = res.Freed[:0]
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
	return res, nil
}
