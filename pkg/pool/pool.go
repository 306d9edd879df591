// Package pool implements the commands shared by plugins that hand out whole
// devices exclusively: count them for INFO, choose and record them for ADD,
// free them for DEL and GC, list them with their holders for DEVICES, and
// publish allocations as CDI spec files. A plugin implements Discoverer,
// and Counter, Placer, Lister and Setup when it has them; pool owns the
// store session and its transaction and the mapping of failures to
// protocol codes.
//
// The files follow the concerns: add.go (ADD, top to bottom), choose.go
// (the choice and setup of one request item), free.go (DEL and GC),
// publish.go (CDI spec files), args.go (the shared cdi_spec arg).
package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cdi-exec/plugins/internal/alloc"
	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// HoldLimit bounds how long ADD, DEL and GC hold the store's lock once they
// have it (docs/protocol.md#store). The work (discovery, setup, delegates)
// must end within the first three quarters; the last quarter is kept for
// undoing the setup of a failed ADD, so that it is never left half done.
const HoldLimit = 20 * time.Second

// UnknownNUMA is the NUMA node of a device whose node is not known (a
// host without NUMA, a device on no PCI function).
const UnknownNUMA = alloc.Unknown

// Device is a usable device present on the host.
type Device struct {
	Key   string   // stable identity across reboots (PCI address, tty name)
	Index int      // preference order; lower first
	NUMA  int      // NUMA node or UnknownNUMA
	Nodes []string // container-facing device node paths, in handout order
	// Live, when set, checks the device live as it is handed out and
	// gives its final node paths; discovery (or a cache) gives nodes by
	// their conventional names and leaves the per-device reads to the
	// few devices chosen.
	Live Resolver
	// Dir is the device's sysfs directory on the host, when discovery
	// has it, for a Placer.
	Dir string
	// PCIe is the device's place in the PCIe tree: its root complex as
	// the kernel names it ("pci0000:00"), then the PCI functions from the
	// root port down to the device's own (or the one it hangs off); nil
	// when unknown. Filled in from the Placer when the choice needs it.
	PCIe   []string
	placed bool
}

// nodes returns the device's final node paths.
func (d Device) nodes() ([]string, error) {
	if d.Live != nil {
		return d.Live.Resolve()
	}
	return d.Nodes, nil
}

// What a plugin implements. Every method gets the command's context, which
// carries its deadline, and the call; nothing keeps a copy of either.

// Discoverer finds the usable devices present now, in any order. ADD
// calls it inside its store transaction, while the plugin holds its
// store's lock, so a plugin may change the host there (sriov creates VFs)
// knowing what is allocated (Scan.Held).
type Discoverer interface {
	Discover(ctx context.Context, c *skel.Call, scan Scan) ([]Device, error)
}

// Counter answers INFO without building devices: the number of usable
// devices.
type Counter interface {
	Capacity(ctx context.Context, c *skel.Call) (int, error)
}

// Placer reads where a device sits: its NUMA node and its PCIe chain
// (as Device.PCIe). ADD asks only when the choice depends on place (more
// than one device, or a NUMA request), and for the devices it hands out,
// so INFO and single-device ADDs do not pay for it.
type Placer interface {
	Place(ctx context.Context, c *skel.Call, d Device) (numa int, pcie []string)
}

// Lister lists every device the plugin sees, usable or not, for the
// DEVICES extension and to say why a pinned key cannot be had.
type Lister interface {
	Inventory(ctx context.Context, c *skel.Call) ([]protocol.DeviceInfo, error)
}

// Setup is implemented by plugins that set devices up (sriov). Handout
// turns the devices chosen for one request item into the nodes handed
// out, with an undo that ADD calls if it fails later; the devices' live
// check is then the plugin's. Teardown runs before a record is deleted by
// DEL or GC, with what the record holds; its error is reported, and the
// record is deleted anyway.
type Setup interface {
	Handout(ctx context.Context, c *skel.Call, item request.Item, chosen []Device) (Handout, error)
	Teardown(ctx context.Context, c *skel.Call, rec Record) error
}

// Record is what a request-id holds in a plugin, as Setup.Teardown sees
// it before it is freed.
type Record struct {
	ID   string // the request-id
	Type string // the resource type it was allocated under
	// Owner is the CDI_REQUEST_OWNER of its first ADD ("kubernetes" for
	// the Kubernetes modes); "" when the caller named none.
	Owner       string
	Allocations []Allocation // one per request item, in the order made
}

// Allocation is what one request item of a Record holds.
type Allocation struct {
	Spec string   // the item's resource-spec (request.Item.Spec.String())
	Keys []string // the devices' keys, in handout order (ShareKey for a share)
	// Delegate is the plugin chain-loaded for it (Handout.Delegate), or "".
	Delegate string
}

// recordView is what Setup.Teardown sees of rec.
func recordView(rec *store.Record) Record {
	r := Record{ID: rec.ID, Type: rec.Type, Owner: rec.Owner, Allocations: make([]Allocation, len(rec.Allocations))}
	for i, a := range rec.Allocations {
		keys := make([]string, len(a.Devices))
		for j, d := range a.Devices {
			keys[j] = d.Key
		}
		r.Allocations[i] = Allocation{Spec: a.Spec, Keys: keys, Delegate: a.Delegate}
	}
	return r
}

// Permitter gives the CDI device-node permissions ("rw", "rwm") of a
// device's nodes in the CDI spec files the pool publishes, by the device's
// store key; "" leaves the runtime's default.
type Permitter interface {
	Permissions(key string) string
}

// Resolver checks one device that is being handed out, live, and returns
// its final node paths. An error means the device must not be handed
// out: ADD then discovers again and chooses again.
type Resolver interface {
	Resolve() ([]string, error)
}

// Pool runs the exclusive-allocation commands for one plugin. It implements
// skel.Plugin (and GC and DEVICES), so a plugin embeds it and hands it
// itself as the interfaces above it implements.
type Pool struct {
	// Name is the plugin's binary name; the store is <Name>.db.
	Name string
	// Spec, when set, publishes allocations as CDI spec files (the
	// cdi_spec arg that Args returns, docs/cdi-bridge.md).
	Spec *Spec
	// Strict makes a requested NUMA locality mandatory (code 105).
	Strict bool
	// Shared lists, in handout order, host-wide nodes that a device's
	// Resolver may return besides its own (drm's /dev/kfd,
	// /dev/nvidiactl): an allocation hands each out once, after every
	// device's own nodes.
	Shared []string

	Discoverer Discoverer // required
	Counter    Counter    // optional: INFO counts what Discover returns without it
	Placer     Placer     // optional
	Lister     Lister     // optional: DEVICES is unsupported without it
	Setup      Setup      // optional
	Permitter  Permitter  // optional: the runtime's default permissions without it

	// hold replaces HoldLimit in tests.
	hold time.Duration
}

// Scan tells Discover what the command needs.
type Scan struct {
	// NUMA asks for the NUMA node of every device returned (ADD).
	NUMA bool
	// Holder, when set, returns the request-id holding a device, "" when
	// it is free. ADD scans inside its store transaction and passes the
	// store's index, so that on a busy node only the devices that could be
	// chosen pay for attribute reads.
	Holder func(key string) string
	// RequestID is the request an ADD serves: its own devices are scanned,
	// so that a replay reports their current names.
	RequestID string
	// Rescan asks for the host to be read again rather than a cache:
	// a device chosen from the last answer failed its live check.
	Rescan bool
	// Need is how many devices the ADD can take: the sum of its request
	// items' amounts (a pinned ADD's is the number of keys it names); 0
	// when the command takes none. Own are the keys RequestID holds now.
	// A discoverer that cannot list every device lists, of such a unit,
	// Own and Need free ones (the generic plugin's unit of unlimited
	// shares, whose shares are as many as are held).
	Need int
	Own  []string
}

// Held reports whether any request holds key.
func (s Scan) Held(key string) bool { return s.Holder != nil && s.Holder(key) != "" }

// Skipped reports whether the scan may leave key out: another request
// holds it.
func (s Scan) Skipped(key string) bool {
	if s.Holder == nil {
		return false
	}
	h := s.Holder(key)
	return h != "" && h != s.RequestID
}

// Handout is what Setup.Handout produced for one request item.
type Handout struct {
	Nodes    []string
	Delegate string // plugin chain-loaded, recorded for DEL
	// Undo takes the setup back when the ADD fails after it; it gets a
	// context of its own, as ADD's may have run out.
	Undo func(ctx context.Context)
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
	return false, &protocol.MemberError{Name: "numa_policy", // placed at args.numa_policy (skel.ArgsError)
		Err: fmt.Errorf("numa_policy: %q is neither \"preferred\" nor \"strict\"", policy),
		At:  fmt.Errorf("%q is neither \"preferred\" nor \"strict\"", policy)}
}

// Info counts the usable devices: the node's allocatable capacity, 0
// while a container_edits mount of the cdi_spec arg is missing from the
// host (ADD would refuse to publish it; DEVICES says why). It does
// not open the store, but refuses, as ADD would, a store location that is
// unsafe or an empty store file (store.Probe).
func (p Pool) Info(ctx context.Context, c *skel.Call) (map[string]int, error) {
	if _, err := store.Probe(store.Path(c.Env.StateDir, p.Name)); err != nil {
		return nil, storeError(err)
	}
	if err := p.CheckHooks(c); err != nil {
		return nil, err
	}
	if p.Spec.config().CheckHost(c.Env.HostRoot) != nil {
		return map[string]int{c.Config.Type: 0}, nil // ADD would refuse to publish: DEVICES says why
	}
	if p.Counter != nil {
		n, err := p.Counter.Capacity(ctx, c)
		if err != nil {
			return nil, discoveryError(c, err)
		}
		return map[string]int{c.Config.Type: n}, nil
	}
	devs, err := p.discover(ctx, c, Scan{})
	if err != nil {
		return nil, err
	}
	return map[string]int{c.Config.Type: len(devs)}, nil
}

// CheckHooks refuses, as an invalid config (101), a cdi_spec whose
// container_edits hooks run a program that anyone but root could replace
// (cdispec.Config.CheckHooks): INFO, DEVICES and ADD say so, while DEL and
// GC, which only free, go on.
func (p Pool) CheckHooks(c *skel.Call) error {
	if err := p.Spec.config().CheckHooks(c.Env.HostRoot); err != nil {
		return protocol.Errorf(protocol.CodeInvalidConfig, "%w", err)
	}
	return nil
}

func (p Pool) discover(ctx context.Context, c *skel.Call, scan Scan) ([]Device, error) {
	devs, err := p.Discoverer.Discover(ctx, c, scan)
	if err != nil {
		return nil, discoveryError(c, err)
	}
	return devs, nil
}

// discoveryError maps a failure of discovery to a protocol error: errors
// that carry a code keep it (sriov's setup, 107), others become code 100.
func discoveryError(c *skel.Call, err error) error {
	var e *protocol.Error
	if errors.As(err, &e) {
		return err
	}
	return protocol.Errorf(protocol.CodeInternal, "discovering devices under %s: %w", c.Env.HostRoot, err)
}

// Devices answers the DEVICES extension: the inventory, with the holder
// of each device read from the store (read-only, bounded wait).
func (p Pool) Devices(ctx context.Context, c *skel.Call) ([]protocol.DeviceInfo, error) {
	if p.Lister == nil {
		return nil, protocol.NewError(protocol.CodeCommandUnsupported, "Unsupported command: DEVICES")
	}
	if err := p.CheckHooks(c); err != nil {
		return nil, err
	}
	devs, err := p.Lister.Inventory(ctx, c)
	if err != nil {
		return nil, discoveryError(c, err)
	}
	if err := p.Spec.config().CheckHost(c.Env.HostRoot); err != nil {
		for i := range devs {
			if devs[i].Usable {
				devs[i].Usable, devs[i].Reason = false, err.Error()
			}
		}
	}
	st, err := p.open(c, store.Options{ReadOnly: true})
	if errors.Is(err, store.ErrNotExist) {
		return devs, nil
	}
	if err != nil {
		return nil, err
	}
	defer st.Close()
	err = st.View(func(tx *store.Tx) error {
		unlimited := unlimitedHolders(tx, devs)
		for i := range devs {
			d := &devs[i]
			switch {
			case d.Unlimited:
				d.Holders = unlimited[d.Key]
			case d.Shares <= 1:
				d.HeldBy = tx.Holder(d.Key)
			default:
				for s := range d.Shares { // one entry per held share
					if h := tx.Holder(ShareKey(d.Key, s)); h != "" {
						d.Holders = append(d.Holders, h)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, storeError(err)
	}
	return devs, nil
}

// unlimitedHolders returns the holders of the shares of each unit of
// unlimited shares among devs, in share order, by the unit's key: its
// shares are as many as are held, so they are read from the store's
// index, one pass for all of them, and nothing when devs has none.
func unlimitedHolders(tx *store.Tx, devs []protocol.DeviceInfo) map[string][]string {
	type share struct {
		i      int
		holder string
	}
	shares := map[string][]share{}
	for _, d := range devs {
		if d.Unlimited {
			shares[d.Key] = nil
		}
	}
	if len(shares) == 0 {
		return nil
	}
	for key, id := range tx.Held() {
		unit, i := ShareOf(key)
		if held, ok := shares[unit]; ok {
			shares[unit] = append(held, share{i, id})
		}
	}
	out := make(map[string][]string, len(shares))
	for unit, held := range shares {
		slices.SortFunc(held, func(a, b share) int { return a.i - b.i })
		for _, s := range held {
			out[unit] = append(out[unit], s.holder)
		}
	}
	return out
}

// session is one command's hold on the store: the call, the open store
// (its lock taken), and the two deadlines of that hold: hold ends at
// HoldLimit, work a quarter earlier, so that undoing a failed setup still
// fits.
type session struct {
	call       *skel.Call
	st         *store.Store
	hold, work context.Context
	cancel     [2]context.CancelFunc
}

// begin opens the store with opt, which takes its lock, and starts the
// deadlines of the hold. Only a plugin that sets devices up (Setup) has
// work that waits and can be cut off; for the others hold and work are ctx
// itself, as the timer of a deadline would set up the runtime's poller (an
// epoll instance, an eventfd, a thread) in every ADD, DEL and GC for
// nothing (docs/performance.md). end releases them and closes the store.
func (p Pool) begin(ctx context.Context, c *skel.Call, opt store.Options) (*session, error) {
	st, err := p.open(c, opt)
	if err != nil {
		return nil, err
	}
	s := &session{call: c, st: st, hold: ctx, work: ctx, cancel: [2]context.CancelFunc{nop, nop}}
	if p.Setup == nil {
		return s, nil
	}
	limit := p.hold
	if limit <= 0 {
		limit = HoldLimit
	}
	now := time.Now()
	s.hold, s.cancel[0] = context.WithDeadline(ctx, now.Add(limit))
	s.work, s.cancel[1] = context.WithDeadline(s.hold, now.Add(limit*3/4))
	return s, nil
}

func nop() {}

// end releases the deadlines and closes the store.
func (s *session) end() {
	s.cancel[1]()
	s.cancel[0]()
	s.st.Close()
}

// open opens the plugin's store with opt and the call's lock timeout, and
// maps failures to code 106 (wrapping the store's error).
func (p Pool) open(c *skel.Call, opt store.Options) (*store.Store, error) {
	opt.Timeout = c.Env.LockTimeout
	st, err := store.Open(store.Path(c.Env.StateDir, p.Name), opt)
	if err != nil {
		return nil, storeError(err)
	}
	return st, nil
}

// storeError maps a failure of a store transaction to a protocol error:
// errors that carry a code keep it, the store's own become code 106.
func storeError(err error) error {
	var e *protocol.Error
	switch {
	case errors.As(err, &e):
		return err
	case errors.Is(err, store.ErrBusy):
		return protocol.Errorf(protocol.CodeStore, "another invocation holds the allocation store; try again: %w", err)
	case errors.Is(err, store.ErrCorrupt):
		return protocol.Errorf(protocol.CodeStore, "the allocation store cannot be read and was left untouched for inspection: %w", err)
	case errors.Is(err, store.ErrUnsafe):
		return protocol.Errorf(protocol.CodeStore, "the allocation store's location is refused: %w", err)
	}
	return protocol.Errorf(protocol.CodeStore, "%w", err)
}
