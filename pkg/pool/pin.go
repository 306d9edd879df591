package pool

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// byKeys is the picker of a pinned ADD (docs/protocol.md#extension-pinned-add): it
// takes exactly the devices named by keys, in their order, and makes no
// choice of its own, so locality and a strict NUMA policy do not apply.
// A key that names a shared unit takes its first free share, in
// discovery order, and one more each time it is named again (a plugin
// whose skel.About has SharedKeys). Every key that cannot be handed out is
// named in one code 103: held by another request, or not among the
// usable devices, with why (the plugin's inventory says, when it has
// one).
func byKeys(keys []string, why func(key string) string) picker {
	return func(item request.Item, devs []Device, free func(key string) bool) ([]Device, error) {
		var chosen []Device
		var bad []string
		took := map[string]bool{}
		named := map[string]int{}
		for _, k := range keys {
			named[k]++
			// A key names a unit: the device of that key, or a free share
			// of it (Unit) not taken by an earlier naming.
			i := slices.IndexFunc(devs, func(d Device) bool { return Unit(d.Key) == k && free(d.Key) && !took[d.Key] })
			switch {
			case i >= 0:
				chosen = append(chosen, devs[i])
				took[devs[i].Key] = true
			case named[k] > 1:
				if named[k] == 2 { // one message for the key, however often it is named
					times := len(slices.DeleteFunc(slices.Clone(keys), func(o string) bool { return o != k }))
					bad = append(bad, fmt.Sprintf("%s: named %d times, more than its free shares", k, times))
				}
			case !free(k) || slices.ContainsFunc(devs, func(d Device) bool { return Unit(d.Key) == k }):
				bad = append(bad, k+": held by another request")
			default:
				bad = append(bad, k+": "+why(k))
			}
		}
		if len(bad) > 0 {
			return nil, protocol.Errorf(protocol.CodeInsufficient, "%s: %s", item.Spec, strings.Join(bad, "; "))
		}
		return chosen, nil
	}
}

// unusable says why key is not among the usable devices, from the
// plugin's inventory when it has one.
func (p Pool) unusable(ctx context.Context, c *skel.Call, key string) string {
	if p.Lister == nil {
		return "no such device"
	}
	devs, err := p.Lister.Inventory(ctx, c)
	if err != nil {
		return fmt.Sprintf("no such device (the inventory failed: %v)", err)
	}
	for _, d := range devs {
		if d.Key == key && d.Reason != "" {
			return d.Reason
		}
	}
	return "no such device"
}

// samePinned checks a replayed pinned item: the request must name the
// devices recorded, in any order (else 104).
func samePinned(id string, old store.Allocation, keys []string) error {
	had := make([]string, len(old.Devices))
	for i, d := range old.Devices {
		had[i] = Unit(d.Key)
	}
	want := slices.Clone(keys)
	slices.Sort(had)
	slices.Sort(want)
	if !slices.Equal(had, want) {
		return protocol.Errorf(protocol.CodeConflict, "request %q already holds %s of %s; asked for %s",
			id, strings.Join(had, ","), old.Spec, strings.Join(keys, ","))
	}
	return nil
}

// Unit is the device a store key stands for: a device that several
// requests may hold at once (the generic plugin's shares) is one device
// in the store per share, share 0 keyed by the device's own key and share
// i > 0 by <key>/<i>. Keys never contain "/" otherwise (their grammar
// forbids it), so other plugins' keys are their own units, and a pinned
// ADD names units.
func Unit(key string) string {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return key
}

// ShareKey is the store key of share i of the device key (Unit).
func ShareKey(key string, i int) string {
	if i == 0 {
		return key
	}
	return key + "/" + strconv.Itoa(i)
}

// ShareOf is the inverse of ShareKey: the device a store key stands for
// (Unit) and the share it is, 0 for a key of no share.
func ShareOf(key string) (unit string, i int) {
	unit, n, ok := strings.Cut(key, "/")
	if !ok {
		return key, 0
	}
	i, err := strconv.Atoi(n)
	if err != nil || i < 1 {
		return unit, 0 // not a key ShareKey makes
	}
	return unit, i
}
