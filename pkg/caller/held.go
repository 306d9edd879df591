package caller

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cdi-exec/plugins/internal/store"
)

// Holding is what a request-id held in one plugin's store before a call:
// its resource type and the amount of each resource-spec. Unknown is set
// when the store could not be read, so that it may hold anything.
type Holding struct {
	Plugin  string
	Type    string
	Amounts map[string]int
	Unknown error
}

func (h Holding) String() string {
	if h.Unknown != nil {
		return fmt.Sprintf("%s (store unreadable: %v)", h.Plugin, h.Unknown)
	}
	var items []string
	for _, spec := range slices.Sorted(maps.Keys(h.Amounts)) {
		items = append(items, fmt.Sprintf("%s:%d", spec, h.Amounts[spec]))
	}
	return fmt.Sprintf("%s in %s", strings.Join(items, ","), h.Plugin)
}

// Held reads what id holds in every plugin store in stateDir, through the
// stores' read-only API (a shared lock for one read, waiting at most
// timeout). A store that cannot be read is a Holding with Unknown set.
func Held(stateDir string, timeout time.Duration, id string) ([]Holding, error) {
	files, err := store.Stores(stateDir)
	if err != nil {
		return nil, err
	}
	var out []Holding
	for _, f := range files {
		h := Holding{Plugin: store.PluginOf(f)}
		err := store.Inspect(f, timeout, func(tx *store.Tx) error {
			r, err := tx.Get(id)
			if err != nil || r == nil {
				return err
			}
			h.Type, h.Amounts = r.Type, map[string]int{}
			for _, al := range r.Allocations {
				h.Amounts[al.Spec] = al.Amount
			}
			return nil
		})
		switch {
		case errors.Is(err, store.ErrNotExist):
		case err != nil:
			h.Unknown = err
			out = append(out, h)
		case h.Amounts != nil:
			out = append(out, h)
		}
	}
	return out, nil
}

// Reaches returns the plugins whose stores a DEL through this config
// touches: its own, and those of its delegates (args.delegate.plugin, at
// any depth; docs/chaining.md).
func (c Config) Reaches() []string {
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
