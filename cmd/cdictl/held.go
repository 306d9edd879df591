package main

// This file is what the request-ids hold, read from the stores, and which
// config answers for each allocation, decided by the records themselves.
// A plugin keeps one record per request-id, whatever the types: the
// generic plugin serves kvm, fuse and tun from one store, and drm keeps
// its own gpu allocations and, as sriov's delegate, sriov's vgpu ones.
// So ls, del and gc name an allocation by its own type (the type of its
// spec, store.Allocation.Type) and its delegate, never by the config
// that happened to run first.

import (
	"errors"
	"slices"
	"time"

	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/caller"
)

// storeView is what one plugin's store held when read: its records by
// request-id, as far as the command asked, and the store's identity. Err
// is set when the store could not be read; it may then hold anything.
type storeView struct {
	File    string
	Plugin  string
	StoreID string
	Records map[string]*store.Record
	Err     error
}

// readStoreViews reads the record of id, or every record when id is "",
// from every store in stateDir, sorted by file, through the stores'
// read-only API (a shared lock for one read, waiting at most timeout). A
// state directory that cannot be read is the error; a store that cannot
// be read is a view with Err set.
func readStoreViews(stateDir string, timeout time.Duration, id string) ([]storeView, error) {
	files, err := store.Stores(stateDir)
	if err != nil {
		return nil, err
	}
	var out []storeView
	for _, f := range files {
		v := storeView{File: f, Plugin: store.PluginOf(f), Records: map[string]*store.Record{}}
		err := store.Inspect(f, timeout, func(tx *store.Tx) error {
			v.StoreID = tx.ID()
			if id != "" {
				r, err := tx.Get(id)
				if r != nil {
					v.Records[id] = r
				}
				return err
			}
			return tx.ForEach(func(r *store.Record) error {
				v.Records[r.ID] = r
				return nil
			})
		})
		if errors.Is(err, store.ErrNotExist) { // removed since listed
			continue
		}
		if err != nil {
			v.Records, v.Err = nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// holders answers, from the records of storeViews, which config stands
// for what a request-id holds in a plugin.
type holders struct {
	views []storeView
	confs []caller.Config
}

// record returns the record of id in plugin's store, and whether the
// store could be read.
func (h holders) record(plugin, id string) (*store.Record, bool) {
	for _, v := range h.views {
		if v.Plugin == plugin {
			return v.Records[id], v.Err == nil
		}
	}
	return nil, true // no store: it holds nothing
}

// delegateOf returns the plugin that chain-loaded plugin for id's
// allocation of typ: the plugin whose record of id names plugin as the
// delegate of an allocation of that type; "" when none does. The
// delegate's own record of it is then a copy, listed by ls under
// delegateOf and answered for by the delegating plugin's config.
func (h holders) delegateOf(plugin, id, typ string) string {
	for _, v := range h.views {
		if v.Plugin == plugin {
			continue
		}
		if r := v.Records[id]; r != nil {
			for _, al := range r.Allocations {
				if al.Delegate == plugin && al.Type() == typ {
					return v.Plugin
				}
			}
		}
	}
	return ""
}

// ownTypes returns the types of the allocations id holds in plugin on
// the plugin's own account, in record order: every allocation's type,
// less those it keeps as another plugin's delegate. ok is false when the
// store could not be read or holds no record of id.
func (h holders) ownTypes(plugin, id string) (types []string, ok bool) {
	r, read := h.record(plugin, id)
	if !read || r == nil {
		return nil, false
	}
	for _, al := range r.Allocations {
		if t := al.Type(); !slices.Contains(types, t) && h.delegateOf(plugin, id, t) == "" {
			types = append(types, t)
		}
	}
	return types, true
}

// answers reports whether conf stands for what id holds in conf's
// plugin: an allocation of conf's type on the plugin's own account, or
// one of a type that no config of the plugin serves (its config was
// removed) when conf is the plugin's first config (its DEL or GC frees
// that as well). known is false when the store says nothing about id (it
// could not be read, or held no record of id when read): the plugin's own
// answer stands then.
func (h holders) answers(conf caller.Config, id string) (yes, known bool) {
	types, ok := h.ownTypes(conf.Plugin, id)
	if !ok {
		return false, false
	}
	if slices.Contains(types, conf.Type) {
		return true, true
	}
	first := slices.IndexFunc(h.confs, func(c caller.Config) bool { return c.Plugin == conf.Plugin })
	if first < 0 || h.confs[first].File != conf.File {
		return false, true
	}
	for _, t := range types {
		if !slices.ContainsFunc(h.confs, func(c caller.Config) bool { return c.Plugin == conf.Plugin && c.Type == t }) {
			return true, true
		}
	}
	return false, true
}
