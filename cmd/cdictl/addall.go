package main

// This file is what only cdictl needs of a cross-plugin ADD: addAll, its
// plan and its exact rollback, and what a request-id held before the call
// (heldBy, read through the stores' read-only API). cdi-kubelet-plugin
// runs one plugin per call (pkg/caller), so it links none of it, nor the
// store (TestKubeletPluginLinksNoStore).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

// addAll allocates a request across the node's plugins, all or nothing.
// Items are routed to the configs of their type in load order; a config
// that answers 103 (not enough) or 4 (unsupported spec) passes the items to
// the next config of the type. held is what the request-id held before
// the call (heldBy).
//
// If any type cannot be served, what this call added is deleted again, and
// only that (a *rollbackError says what was freed and what kept). DEL frees
// everything a request-id holds in a plugin, so:
//   - a type whose items the id already held at the same amounts (a
//     replay, which adds nothing) is never deleted;
//   - a type whose plugins, or their delegates, held something under the
//     id is served last, where it is never rolled back;
//   - a request with two such types cannot be rolled back exactly and is
//     refused with code 104 before any plugin runs.
//
// The answers are returned in the order of the request's types.
func addAll(ctx context.Context, c caller.Caller, confs []caller.Config, id string, req request.Request, numa []int, held []holding) ([]*caller.Added, error) {
	var types []string
	byType := map[string][]request.Item{}
	for _, it := range req.Items {
		if _, ok := byType[it.Spec.Type]; !ok {
			types = append(types, it.Spec.Type)
		}
		byType[it.Spec.Type] = append(byType[it.Spec.Type], it)
	}
	order, replay, err := plan(confs, id, types, byType, held)
	if err != nil {
		return nil, err
	}
	var done []*caller.Added
	for _, typ := range order {
		a, err := addType(ctx, c, caller.OfType(confs, typ), typ, id, byType[typ], numa)
		if err != nil {
			return nil, rollback(ctx, c, done, id, replay, err)
		}
		done = append(done, a)
	}
	slices.SortStableFunc(done, func(a, b *caller.Added) int {
		return slices.Index(types, a.Config.Type) - slices.Index(types, b.Config.Type)
	})
	return done, nil
}

// plan orders the types of a request for addAll: replays first, then the
// types whose plugins held nothing under id, then the one type whose
// plugins did, if any. replay marks the types that are replays.
func plan(confs []caller.Config, id string, types []string, byType map[string][]request.Item, held []holding) (order []string, replay map[string]bool, err error) {
	replay = map[string]bool{}
	var fresh, touched []string
	for _, typ := range types {
		if isReplay(held, byType[typ]) {
			replay[typ] = true
			order = append(order, typ)
			continue
		}
		var reaches []string
		for _, conf := range caller.OfType(confs, typ) {
			reaches = append(reaches, reachOf(conf)...)
		}
		var before []string
		for _, h := range held {
			if slices.Contains(reaches, h.Plugin) {
				before = append(before, h.String())
			}
		}
		if len(before) == 0 {
			fresh = append(fresh, typ)
			continue
		}
		touched = append(touched, fmt.Sprintf("%s (already holds %s)", typ, strings.Join(before, "; ")))
	}
	if len(touched) > 1 {
		return nil, nil, protocol.NewError(protocol.CodeConflict, fmt.Sprintf(
			"request-id %s already holds something in the plugins of more than one new type of this request: %s; "+
				"a failure could not be rolled back without freeing that too (DEL frees all an id holds in a plugin): "+
				"add these types one call at a time, or use a fresh request-id", id, strings.Join(touched, ", ")))
	}
	order = append(order, fresh...)
	for _, typ := range types {
		if !replay[typ] && !slices.Contains(fresh, typ) {
			order = append(order, typ)
		}
	}
	return order, replay, nil
}

// isReplay reports whether a store held every item of a type at the same
// amount: an ADD of them hands out what is recorded and adds nothing.
// The items' specs are of the type, so the store's record holds them
// whatever its other types (generic's kvm beside its fuse).
func isReplay(held []holding, items []request.Item) bool {
	for _, h := range held {
		if h.Unknown != nil {
			continue
		}
		all := true
		for _, it := range items {
			if n, ok := h.Amounts[it.Spec.String()]; !ok || n != it.Amount {
				all = false
			}
		}
		if all {
			return true
		}
	}
	return false
}

// rollbackError is a failed addAll: the failure, and what was done about
// what the call had added before it.
type rollbackError struct {
	Err   error
	Freed []caller.Config // DEL was run: what this call added there is freed
	Kept  []caller.Config // replays: the id held this before, and still does
}

func (e *rollbackError) Error() string { return e.Err.Error() }
func (e *rollbackError) Unwrap() error { return e.Err }

// addType runs ADD of one type's items through its configs in load
// order, passing them on when a plugin has too few (103) or does not
// serve the spec (4).
func addType(ctx context.Context, c caller.Caller, confs []caller.Config, typ, id string, items []request.Item, numa []int) (*caller.Added, error) {
	if len(confs) == 0 {
		return nil, protocol.NewError(protocol.CodeSpecUnsupported, fmt.Sprintf("Unsupported resource-spec: %s (no config in %s.d)", typ, typ))
	}
	var last error
	for _, conf := range confs {
		a, err := c.Add(ctx, conf, id, items, numa)
		if err == nil {
			return a, nil
		}
		last = err
		var pe *caller.PluginError
		if errors.As(err, &pe) && (pe.Code() == protocol.CodeInsufficient || pe.Code() == protocol.CodeSpecUnsupported) {
			continue
		}
		break
	}
	return nil, last
}

// rollback deletes what an addAll had added, newest first, leaving the
// replays alone, and returns err as a *rollbackError.
func rollback(ctx context.Context, c caller.Caller, done []*caller.Added, id string, replay map[string]bool, err error) error {
	rb := &rollbackError{Err: err}
	for i := len(done) - 1; i >= 0; i-- {
		if replay[done[i].Config.Type] {
			rb.Kept = append(rb.Kept, done[i].Config)
			continue
		}
		// DEL never fails the caller; a failure here is already logged by
		// the plugin and will be caught by GC.
		_, _ = c.Del(ctx, done[i].Config, id)
		rb.Freed = append(rb.Freed, done[i].Config)
	}
	return rb
}

// holding is what a request-id held in one plugin's store before a call:
// the amount of each resource-spec. Unknown is set when the store could
// not be read, so that it may hold anything.
type holding struct {
	Plugin  string
	Amounts map[string]int
	Unknown error
}

func (h holding) String() string {
	if h.Unknown != nil {
		return fmt.Sprintf("%s (store unreadable: %v)", h.Plugin, h.Unknown)
	}
	var items []string
	for _, spec := range slices.Sorted(maps.Keys(h.Amounts)) {
		items = append(items, fmt.Sprintf("%s:%d", spec, h.Amounts[spec]))
	}
	return fmt.Sprintf("%s in %s", strings.Join(items, ","), h.Plugin)
}

// heldBy reads what id holds in every plugin store in stateDir
// (readStoreViews). A store that cannot be read is a holding with Unknown
// set.
func heldBy(stateDir string, timeout time.Duration, id string) ([]holding, error) {
	views, err := readStoreViews(stateDir, timeout, id)
	if err != nil {
		return nil, err
	}
	var out []holding
	for _, v := range views {
		switch r := v.Records[id]; {
		case v.Err != nil:
			out = append(out, holding{Plugin: v.Plugin, Unknown: v.Err})
		case r != nil:
			h := holding{Plugin: v.Plugin, Amounts: map[string]int{}}
			for _, al := range r.Allocations {
				h.Amounts[al.Spec] = al.Amount
			}
			out = append(out, h)
		}
	}
	return out, nil
}

// reachOf returns the plugins whose stores a DEL through this config
// touches: its own, and those of its delegates (args.delegate.plugin, at
// any depth; docs/chaining.md).
func reachOf(c caller.Config) []string {
	out := []string{c.Plugin}
	raw := c.Raw
	for {
		var v struct {
			Args struct {
				Delegate *struct {
					Plugin string          `json:"plugin"`
					Args   json.RawMessage `json:"args"`
				} `json:"delegate"`
			} `json:"args"`
		}
		if json.Unmarshal(raw, &v) != nil || v.Args.Delegate == nil || v.Args.Delegate.Plugin == "" {
			return out
		}
		if slices.Contains(out, v.Args.Delegate.Plugin) {
			return out
		}
		out = append(out, v.Args.Delegate.Plugin)
		raw, _ = json.Marshal(map[string]json.RawMessage{"args": v.Args.Delegate.Args})
	}
}
