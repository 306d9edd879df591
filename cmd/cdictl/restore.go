package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

// This file is `cdictl specs --restore`: it writes back the transient
// spec file of every allocation in the plugins' stores whose file is
// missing (a /var/run/cdi on tmpfs wiped while the allocations lived),
// by the pinned replay ADD of each (docs/cdi-bridge.md#consistency).
// An allocation whose file is there is left alone, and nothing is
// written for an id that no store holds.

// restored is one allocation's spec file written back, or its failure.
type restored struct {
	outcome
	RequestID string `json:"requestId"`
	Spec      string `json:"spec"` // the file
}

// missingSpec is an allocation of a config's store whose spec is missing.
type missingSpec struct {
	conf caller.Config
	id   string
	file string
	// items are its allocations under the config's type: the resource-spec
	// and device keys of each, replayed one by one.
	items []pinned
}

// pinned is one allocation's replay: its resource-spec and device
// keys, or its amount when the keys cannot say it (shares of a device).
type pinned struct {
	spec   request.Spec
	keys   []string
	amount int
}

// restoreSpecs replays the allocations whose spec file is missing. It
// exits 1 when a config, a store or a replay failed.
func (a *app) restoreSpecs(args []string) int {
	if len(args) != 0 {
		return a.usageErr("takes no arguments")
	}
	confs, err := a.configs()
	if err != nil {
		return a.fail(err)
	}
	todo, out, failed := missingSpecs(confs, a.cfg.StateDir, a.cfg.LockTimeout)
	for _, m := range todo {
		e := restored{outcome: outcome{File: m.conf.File, Type: m.conf.Type, Plugin: m.conf.Plugin}, RequestID: m.id, Spec: m.file}
		for _, it := range m.items {
			var err error
			if it.keys != nil {
				_, err = a.caller().AddDevices(a.ctx(), m.conf, m.id, it.spec, it.keys)
			} else {
				_, err = a.caller().Add(a.ctx(), m.conf, m.id, []request.Item{{Spec: it.spec, Amount: it.amount}}, nil)
			}
			if err != nil {
				e.Error = toErrorJSON(err)
				break
			}
		}
		if e.Error == nil {
			if _, err := os.Stat(m.file); err != nil {
				e.Error = toErrorJSON(protocol.Errorf(protocol.CodeSetup, "the replay left no spec file: %w", err))
			}
		}
		failed = failed || e.Error != nil
		out = append(out, e)
	}
	a.report("REQUEST-ID\tTYPE\tPLUGIN\tRESULT\t+SPEC", rowsOf(out, func(e *restored) []string {
		res := "restored"
		if e.Error != nil {
			res = e.Error.String()
		}
		return []string{e.RequestID, e.Type, e.Plugin, res, e.Spec}
	}), rawjson.Field{Key: "cdiVersion", Value: protocol.Latest}, rawjson.Field{Key: "restored", Value: rawjson.NonNil(out)})
	if len(out) == 0 {
		fmt.Fprintln(a.stderr, "cdictl: note: no spec file was missing")
	}
	return a.status(failed)
}

// missingSpecs reads the store of each config with a cdi_spec (read
// only) and returns the allocations of its type whose spec file is
// missing, and an entry for each store that could not be read.
func missingSpecs(confs []caller.Config, stateDir string, timeout time.Duration) ([]missingSpec, []restored, bool) {
	var todo []missingSpec
	var out []restored
	failed := false
	for _, c := range confs {
		spec, err := specOfConfig(c)
		if err != nil || spec == nil {
			continue // a config that publishes nothing, or one load reported
		}
		path := store.Path(stateDir, c.Plugin)
		err = store.Inspect(path, timeout, func(tx *store.Tx) error {
			owner := cdispec.Owner{Plugin: c.Plugin, Store: tx.ID()}
			return tx.ForEach(func(r *store.Record) error {
				if r.Type != c.Type || slices.ContainsFunc(todo, func(m missingSpec) bool { return m.id == r.ID && m.conf.Plugin == c.Plugin && m.conf.Type == c.Type }) {
					return nil
				}
				file := spec.Path(owner, r.ID)
				if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
					return nil
				}
				m := missingSpec{conf: c, id: r.ID, file: file}
				for _, al := range r.Allocations {
					s, err := request.ParseSpec(al.Spec)
					if err != nil {
						return fmt.Errorf("request %s: %w", r.ID, err)
					}
					var keys []string
					for _, d := range al.Devices {
						if k := pool.Unit(d.Key); !slices.Contains(keys, k) {
							keys = append(keys, k)
						}
					}
					if len(keys) != al.Amount {
						keys = nil // shares: a plain replay of the amount
					}
					m.items = append(m.items, pinned{s, keys, al.Amount})
				}
				if len(m.items) > 0 {
					todo = append(todo, m)
				}
				return nil
			})
		})
		if err != nil && !errors.Is(err, store.ErrNotExist) {
			failed = true
			out = append(out, restored{outcome: outcome{File: c.File, Type: c.Type, Plugin: c.Plugin,
				Error: toErrorJSON(protocol.Errorf(protocol.CodeStore, "%w", err))}})
		}
	}
	return todo, out, failed
}

// specOfConfig is the cdi_spec of a config's own args; nil when it has
// none.
func specOfConfig(c caller.Config) (*cdispec.Config, error) {
	args := configArgs(c.Raw)
	if len(args) == 0 {
		return nil, nil
	}
	return cdispec.FromArgs(args[0])
}
