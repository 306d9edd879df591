package pool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/internal/alloc"
	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// host is a fake discovery: the devices present, and the node names they
// resolve to now (which a test may change to model a renumbering).
type host struct {
	devs  []Device
	names map[string][]string
	scans []scanned
}

// scanned is what one scan asked for, read while it ran (the store's
// transaction ends with the command).
type scanned struct {
	numa, store   bool
	skipped, held []string // device keys
	need          int
	own           []string
}

// gpus returns n devices g0..g(n-1) with the given NUMA nodes, each with
// one node /dev/g<i>.
func gpus(numa ...int) *host {
	h := &host{names: map[string][]string{}}
	for i, n := range numa {
		key := fmt.Sprintf("g%d", i)
		h.devs = append(h.devs, Device{Key: key, Index: i, NUMA: n, Nodes: []string{"/dev/" + key}})
	}
	return h
}

// discover behaves as the plugins' discovery: devices other requests hold
// are skipped, and the others resolve their final node names lazily.
func (h *host) discover(_ context.Context, _ *skel.Call, scan Scan) ([]Device, error) {
	seen := scanned{numa: scan.NUMA, store: scan.Holder != nil, need: scan.Need, own: scan.Own}
	defer func() { h.scans = append(h.scans, seen) }()
	var out []Device
	for _, d := range h.devs {
		if scan.Held(d.Key) {
			seen.held = append(seen.held, d.Key)
		}
		if scan.Skipped(d.Key) {
			seen.skipped = append(seen.skipped, d.Key)
			continue
		}
		if n, ok := h.names[d.Key]; ok {
			d.Live = resolveFunc(func() ([]string, error) { return n, nil })
		}
		out = append(out, d)
	}
	return out, nil
}

// unplug removes a device from the host.
func (h *host) unplug(key string) {
	h.devs = slices.DeleteFunc(h.devs, func(d Device) bool { return d.Key == key })
}

// env is one test's private state: a store directory and a pool on a
// fake host.
type env struct {
	t     *testing.T
	state string
	host  *host
	pool  Pool
}

func newEnv(t *testing.T, h *host) *env {
	e := &env{t: t, state: t.TempDir(), host: h}
	e.pool = Pool{Name: "fake", Discoverer: discoverFunc(h.discover)}
	return e
}

// call builds the call skel would hand the plugin.
func (e *env) call(cmd, id, spec string, numa []int) *skel.Call {
	e.t.Helper()
	c := &skel.Call{
		Command: cmd, Version: protocol.Latest, RequestID: id, Locality: numa,
		Config: protocol.Config{CDIVersion: protocol.Latest, Name: "t", Type: "gpu", Plugin: "fake"},
		Env:    protocol.Env{HostRoot: "/nonexistent", StateDir: e.state, LockTimeout: time.Second},
	}
	if spec != "" {
		req, err := request.Parse(spec)
		if err != nil {
			e.t.Fatal(err)
		}
		c.Request = req
	}
	return c
}

func (e *env) add(id, request string, numa ...int) (*skel.AddResult, error) {
	return e.pool.Add(context.Background(), e.call(protocol.CmdAdd, id, request, numa))
}

func (e *env) del(id string) error {
	return e.pool.Del(context.Background(), e.call(protocol.CmdDel, id, "", nil))
}

func (e *env) gc(valid ...string) (*skel.GCResult, error) {
	c := e.call(protocol.CmdGC, "", "", nil)
	c.ValidIDs = map[string]bool{}
	for _, id := range valid {
		c.ValidIDs[id] = true
	}
	return e.pool.GC(context.Background(), c)
}

// records returns what the store holds: request-id → device keys.
func (e *env) records() map[string][]string {
	e.t.Helper()
	out := map[string][]string{}
	st, err := store.Open(store.Path(e.state, "fake"), store.Options{ReadOnly: true, Timeout: time.Second})
	if errors.Is(err, store.ErrNotExist) {
		return out
	}
	if err != nil {
		e.t.Fatal(err)
	}
	defer st.Close()
	err = st.View(func(tx *store.Tx) error {
		if p := tx.Check(); len(p) > 0 {
			e.t.Errorf("store index: %v", p)
		}
		return tx.ForEach(func(r *store.Record) error {
			for _, d := range r.Devices() {
				out[r.ID] = append(out[r.ID], d.Key)
			}
			return nil
		})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func code(err error) int {
	if err == nil {
		return 0
	}
	return protocol.AsError(err).Code
}

// step is one command of a table case and what it must answer.
type step struct {
	cmd     string // ADD (default), DEL, GC
	id      string
	request string
	numa    []int
	pinned  []string // ADD: CDI_REQUEST_DEVICES
	valid   []string // GC

	before func(h *host) // changes the host first

	code    int      // expected protocol code, 0 for success
	detail  string   // a text the error must contain
	devices []string // ADD: the nodes answered
	local   []int    // ADD: the NUMA nodes answered
	freed   []string // GC
}

func (e *env) run(i int, s step) {
	e.t.Helper()
	if s.before != nil {
		s.before(e.host)
	}
	var err error
	switch s.cmd {
	case "", protocol.CmdAdd:
		var res *skel.AddResult
		c := e.call(protocol.CmdAdd, s.id, s.request, s.numa)
		c.Pinned = s.pinned
		res, err = e.pool.Add(context.Background(), c)
		if err == nil && (!slices.Equal(res.Devices, s.devices) || !slices.Equal(res.NUMA, s.local)) {
			e.t.Errorf("step %d: ADD %s %s = %v numa %v; want %v numa %v", i, s.id, s.request, res.Devices, res.NUMA, s.devices, s.local)
		}
	case protocol.CmdDel:
		err = e.del(s.id)
	case protocol.CmdGC:
		var res *skel.GCResult
		res, err = e.gc(s.valid...)
		if err == nil && !slices.Equal(res.Freed, s.freed) {
			e.t.Errorf("step %d: GC freed %v; want %v", i, res.Freed, s.freed)
		}
	}
	if code(err) != s.code {
		e.t.Errorf("step %d: %s %s: error %v; want code %d", i, s.cmd, s.id, err, s.code)
	}
	if s.detail != "" && (err == nil || !strings.Contains(err.Error(), s.detail)) {
		e.t.Errorf("step %d: %s %s: error %v; want it to say %q", i, s.cmd, s.id, err, s.detail)
	}
}

func TestCommands(t *testing.T) {
	tests := []struct {
		name   string
		numa   []int // NUMA node of g0, g1, ...
		strict bool
		steps  []step
		after  map[string][]string // the store at the end
	}{
		{name: "fresh ADD takes the fewest NUMA groups, lowest index first",
			numa: []int{0, 1, 1, 0},
			steps: []step{
				{id: "a", request: "gpu:2", devices: []string{"/dev/g0", "/dev/g3"}, local: []int{0}},
				{id: "b", request: "gpu:1", devices: []string{"/dev/g1"}, local: []int{1}},
			},
			after: map[string][]string{"a": {"g0", "g3"}, "b": {"g1"}}},
		{name: "items of one request get distinct devices",
			numa: []int{0, 0, 0},
			steps: []step{
				{id: "a", request: "gpu:1,gpu-mem:2", devices: []string{"/dev/g0", "/dev/g1", "/dev/g2"}, local: []int{0}},
			},
			after: map[string][]string{"a": {"g0", "g1", "g2"}}},
		{name: "replay answers the same devices under their current names",
			numa: []int{0, 0, 0},
			steps: []step{
				{id: "a", request: "gpu:2", devices: []string{"/dev/g0", "/dev/g1"}, local: []int{0}},
				{id: "a", request: "gpu:2", devices: []string{"/dev/g0", "/dev/g1"}, local: []int{0}},
				{id: "a", request: "gpu:2", before: func(h *host) { h.names["g1"] = []string{"/dev/renamed"} },
					devices: []string{"/dev/g0", "/dev/renamed"}, local: []int{0}},
				{id: "a", request: "gpu:2", before: func(h *host) { h.unplug("g0") },
					devices: []string{"/dev/g0", "/dev/renamed"}, local: []int{0}},
			},
			after: map[string][]string{"a": {"g0", "g1"}}},
		{name: "replay adds a new item and keeps the old one",
			numa: []int{0, 0, 0},
			steps: []step{
				{id: "a", request: "gpu:1", devices: []string{"/dev/g0"}, local: []int{0}},
				{id: "a", request: "gpu:1,gpu-mem:1", devices: []string{"/dev/g0", "/dev/g1"}, local: []int{0}},
			},
			after: map[string][]string{"a": {"g0", "g1"}}},
		{name: "another amount for a held spec conflicts (104) and changes nothing",
			numa: []int{0, 0, 0, 0},
			steps: []step{
				{id: "a", request: "gpu:2", devices: []string{"/dev/g0", "/dev/g1"}, local: []int{0}},
				{id: "a", request: "gpu:1", code: protocol.CodeConflict},
				{id: "a", request: "gpu:1,gpu-mem:1", code: protocol.CodeConflict},
				{id: "b", request: "gpu:2", devices: []string{"/dev/g2", "/dev/g3"}, local: []int{0}},
			},
			after: map[string][]string{"a": {"g0", "g1"}, "b": {"g2", "g3"}}},
		{name: "not enough free devices is 103, all or nothing",
			numa: []int{0, 0, 0},
			steps: []step{
				{id: "a", request: "gpu:2", devices: []string{"/dev/g0", "/dev/g1"}, local: []int{0}},
				{id: "b", request: "gpu:2", code: protocol.CodeInsufficient},
				{id: "b", request: "gpu-mem:1,gpu:1", code: protocol.CodeInsufficient},
				{cmd: protocol.CmdDel, id: "b", code: protocol.CodeUnknownRequestID},
			},
			after: map[string][]string{"a": {"g0", "g1"}}},
		{name: "a held device that was unplugged stays held",
			numa: []int{0, 0},
			steps: []step{
				{id: "a", request: "gpu:1", devices: []string{"/dev/g0"}, local: []int{0}},
				{id: "b", request: "gpu:2", before: func(h *host) { h.unplug("g0") }, code: protocol.CodeInsufficient},
				{id: "b", request: "gpu:1", before: func(h *host) { h.devs = gpus(0, 0).devs }, devices: []string{"/dev/g1"}, local: []int{0}},
			},
			after: map[string][]string{"a": {"g0"}, "b": {"g1"}}},
		{name: "preferred locality takes the listed node first",
			numa: []int{0, 0, 1, 1},
			steps: []step{
				{id: "a", request: "gpu:2", numa: []int{1}, devices: []string{"/dev/g2", "/dev/g3"}, local: []int{1}},
				{id: "b", request: "gpu:1", numa: []int{1}, devices: []string{"/dev/g0"}, local: []int{0}},
			}},
		{name: "strict locality is 105 when the listed node lacks devices",
			numa: []int{0, 0, 1, 1}, strict: true,
			steps: []step{
				{id: "a", request: "gpu:2", numa: []int{1}, devices: []string{"/dev/g2", "/dev/g3"}, local: []int{1}},
				{id: "b", request: "gpu:1", numa: []int{1}, code: protocol.CodeNUMA},
				{id: "b", request: "gpu:3", numa: []int{0}, code: protocol.CodeInsufficient},
				{id: "b", request: "gpu:2", numa: []int{0}, devices: []string{"/dev/g0", "/dev/g1"}, local: []int{0}},
			},
			after: map[string][]string{"a": {"g2", "g3"}, "b": {"g0", "g1"}}},
		{name: "unknown NUMA is never reported",
			numa: []int{alloc.Unknown, alloc.Unknown},
			steps: []step{
				{id: "a", request: "gpu:2", numa: []int{0}, devices: []string{"/dev/g0", "/dev/g1"}},
			}},
		{name: "DEL frees, and a second DEL is 5",
			numa: []int{0, 0},
			steps: []step{
				{id: "a", request: "gpu:2", devices: []string{"/dev/g0", "/dev/g1"}, local: []int{0}},
				{cmd: protocol.CmdDel, id: "a"},
				{cmd: protocol.CmdDel, id: "a", code: protocol.CodeUnknownRequestID},
				{id: "b", request: "gpu:2", devices: []string{"/dev/g0", "/dev/g1"}, local: []int{0}},
			},
			after: map[string][]string{"b": {"g0", "g1"}}},
		{name: "DEL and GC without a store answer without making one",
			numa: []int{0},
			steps: []step{
				{cmd: protocol.CmdDel, id: "a", code: protocol.CodeUnknownRequestID},
				{cmd: protocol.CmdGC, freed: []string{}},
			}},
		{name: "GC frees what is not valid and keeps what is",
			numa: []int{0, 0, 0, 0},
			steps: []step{
				{id: "a", request: "gpu:1", devices: []string{"/dev/g0"}, local: []int{0}},
				{id: "b", request: "gpu:1", devices: []string{"/dev/g1"}, local: []int{0}},
				{id: "c", request: "gpu:1", devices: []string{"/dev/g2"}, local: []int{0}},
				{cmd: protocol.CmdGC, valid: []string{"b", "other"}, freed: []string{"a", "c"}},
				{cmd: protocol.CmdGC, valid: []string{"b"}, freed: []string{}},
				{id: "d", request: "gpu:3", devices: []string{"/dev/g0", "/dev/g2", "/dev/g3"}, local: []int{0}},
			},
			after: map[string][]string{"b": {"g1"}, "d": {"g0", "g2", "g3"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, gpus(tt.numa...))
			e.pool.Strict = tt.strict
			for i, s := range tt.steps {
				e.run(i, s)
			}
			if tt.after != nil {
				e.wantStore(tt.after)
			}
		})
	}
}

// wantStore checks that the store holds exactly want: request-id → keys.
func (e *env) wantStore(want map[string][]string) {
	e.t.Helper()
	got := e.records()
	if len(got) != len(want) {
		e.t.Errorf("store holds %v; want %v", got, want)
	}
	for id, keys := range want {
		if !slices.Equal(got[id], keys) {
			e.t.Errorf("store: %s holds %v; want %v", id, got[id], keys)
		}
	}
}

// TestStoreFileOnlyWhenNeeded: DEL and GC on a node without a store file
// leave it without one.
func TestStoreFileOnlyWhenNeeded(t *testing.T) {
	e := newEnv(t, gpus(0))
	e.run(0, step{cmd: protocol.CmdDel, id: "a", code: protocol.CodeUnknownRequestID})
	e.run(1, step{cmd: protocol.CmdGC, freed: []string{}})
	if _, err := os.Stat(store.Path(e.state, "fake")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("store file made: %v", err)
	}
}

// TestScanSkipsOthersHeldDevices: ADD scans inside its transaction with
// the store's index, so discovery can skip what other requests hold but
// sees the request's own devices.
func TestScanSkipsOthersHeldDevices(t *testing.T) {
	e := newEnv(t, gpus(0, 0, 0))
	e.run(0, step{id: "a", request: "gpu:1", devices: []string{"/dev/g0"}, local: []int{0}})
	e.run(1, step{id: "b", request: "gpu:1", devices: []string{"/dev/g1"}, local: []int{0}})
	e.host.scans = nil
	e.run(2, step{id: "b", request: "gpu:1", devices: []string{"/dev/g1"}, local: []int{0}})
	s := e.host.scans[0]
	if !s.numa || !s.store || !slices.Equal(s.skipped, []string{"g0"}) || !slices.Equal(s.held, []string{"g0", "g1"}) {
		t.Errorf("ADD's scan %+v; want NUMA, the store, g0 skipped, g0 and g1 held", s)
	}
	info, err := e.pool.Info(context.Background(), e.call(protocol.CmdInfo, "", "", nil))
	if err != nil || info["gpu"] != 3 {
		t.Errorf("INFO = %v, %v; want capacity 3 whatever is held", info, err)
	}
	if s := e.host.scans[1]; s.numa || s.store {
		t.Errorf("INFO's scan %+v reads NUMA or the store", s)
	}
}

// TestScanNeedAndOwn: ADD tells discovery how many devices the request
// can take, the sum of its items' amounts, and which keys it holds, for a
// discoverer that lists only some (a unit of unlimited shares); INFO
// neither.
func TestScanNeedAndOwn(t *testing.T) {
	e := newEnv(t, gpus(0, 0, 0, 0, 0, 0))
	e.run(0, step{id: "a", request: "gpu:2", devices: []string{"/dev/g0", "/dev/g1"}, local: []int{0}})
	e.host.scans = nil
	if _, err := e.pool.Add(context.Background(), e.call(protocol.CmdAdd, "b", "gpu:1", nil)); err != nil {
		t.Fatal(err)
	}
	if s := e.host.scans[0]; s.need != 1 || len(s.own) != 0 {
		t.Errorf("a new request's scan: need %d, own %v; want 1, none", s.need, s.own)
	}
	if _, err := e.pool.Add(context.Background(), e.call(protocol.CmdAdd, "a", "gpu:2", nil)); err != nil {
		t.Fatal(err)
	}
	if s := e.host.scans[1]; s.need != 2 || !slices.Equal(s.own, []string{"g0", "g1"}) {
		t.Errorf("a replay's scan: need %d, own %v; want 2, g0 and g1", s.need, s.own)
	}
	two := e.call(protocol.CmdAdd, "c", "gpu:1", nil)
	two.Request.Items = append(two.Request.Items, request.Item{Spec: request.Spec{Type: "gpu", Subtype: "x"}, Amount: 2})
	if _, err := e.pool.Add(context.Background(), two); err != nil {
		t.Fatal(err)
	}
	if s := e.host.scans[2]; s.need != 3 {
		t.Errorf("gpu:1,gpu-x:2's scan: need %d, want 3", s.need)
	}
	if _, err := e.pool.Info(context.Background(), e.call(protocol.CmdInfo, "", "", nil)); err != nil {
		t.Fatal(err)
	}
	if s := e.host.scans[3]; s.need != 0 || s.own != nil {
		t.Errorf("INFO's scan: need %d, own %v", s.need, s.own)
	}
}

// recorder is a set of hooks that record what they were given.
type recorder struct {
	calls    []*skel.Call
	undone   []string
	torn     []string
	recs     []Record // what each teardown was given
	failItem int      // Handout fails for this item (1-based); 0 never
	block    bool
	deadline time.Time // of the context Handout got
}

func (r *recorder) handout(ctx context.Context, c *skel.Call, item request.Item, chosen []Device) (Handout, error) {
	r.calls = append(r.calls, c)
	r.deadline, _ = ctx.Deadline()
	if len(r.calls) == r.failItem {
		if r.block {
			<-ctx.Done()
			return Handout{}, protocol.Errorf(protocol.CodeSetup, "waiting: %w", ctx.Err())
		}
		return Handout{}, protocol.NewError(protocol.CodeSetup, "no")
	}
	var nodes []string
	for _, d := range chosen {
		nodes = append(nodes, "/dev/set-up-"+d.Key)
	}
	spec := item.Spec.String()
	return Handout{Nodes: nodes, Delegate: "helper", Undo: func(ctx context.Context) {
		if d, ok := ctx.Deadline(); !ok || !d.After(r.deadline) {
			panic("undo without time of its own")
		}
		r.undone = append(r.undone, spec)
	}}, nil
}

func (r *recorder) teardown(ctx context.Context, c *skel.Call, rec Record) error {
	r.calls = append(r.calls, c)
	r.torn = append(r.torn, rec.ID)
	r.recs = append(r.recs, rec)
	if r.block {
		<-ctx.Done()
		return ctx.Err()
	}
	if rec.ID == "bad" {
		return errors.New("helper refused")
	}
	return nil
}

func TestHooks(t *testing.T) {
	e := newEnv(t, gpus(0, 0, 0, 0, 0, 0))
	r := &recorder{}
	e.pool.Setup = setupFuncs{r.handout, r.teardown}

	c := e.call(protocol.CmdAdd, "a", "gpu:1,gpu-mem:2", nil)
	c.Owner = "kubernetes"
	res, err := e.pool.Add(context.Background(), c)
	if err != nil || !slices.Equal(res.Devices, []string{"/dev/set-up-g0", "/dev/set-up-g1", "/dev/set-up-g2"}) {
		t.Fatalf("ADD with Handout = %v, %v", res, err)
	}
	if len(r.calls) != 2 || r.calls[0] != c || r.calls[1] != c {
		t.Errorf("Handout did not get the call: %v", r.calls)
	}
	if time.Until(r.deadline) > HoldLimit || r.deadline.IsZero() {
		t.Errorf("Handout's deadline %v is not within HoldLimit", r.deadline)
	}
	// A replay answers the recorded nodes without setting up again.
	if res, err = e.pool.Add(context.Background(), c); err != nil || len(res.Devices) != 3 || len(r.calls) != 2 {
		t.Errorf("replay = %v, %v after %d Handouts", res, err, len(r.calls))
	}

	// The second item fails: the first item's setup is undone, nothing
	// is recorded.
	r.failItem = 4
	if _, err := e.add("b", "gpu:1,gpu-mem:1"); code(err) != protocol.CodeSetup {
		t.Errorf("failing Handout: %v", err)
	}
	if !slices.Equal(r.undone, []string{"gpu"}) {
		t.Errorf("undone %v; want the first item's", r.undone)
	}
	if got := e.records(); len(got) != 1 {
		t.Errorf("failed ADD recorded: %v", got)
	}

	// DEL tears down before it deletes; a teardown error is reported and
	// the record deleted anyway.
	r.calls = nil
	c = e.call(protocol.CmdDel, "a", "", nil)
	if err := e.pool.Del(context.Background(), c); err != nil || !slices.Equal(r.torn, []string{"a"}) || r.calls[0] != c {
		t.Errorf("DEL: %v, torn down %v", err, r.torn)
	}
	// Teardown sees the record: id, type, owner, and each item's keys
	// and delegate.
	want := Record{ID: "a", Type: "gpu", Owner: "kubernetes", Allocations: []Allocation{
		{Spec: "gpu", Keys: []string{"g0"}, Delegate: "helper"},
		{Spec: "gpu-mem", Keys: []string{"g1", "g2"}, Delegate: "helper"},
	}}
	if len(r.recs) != 1 || !reflect.DeepEqual(r.recs[0], want) {
		t.Errorf("Teardown got %+v; want %+v", r.recs, want)
	}
	r.failItem = 0
	for _, id := range []string{"bad", "good"} {
		if _, err := e.add(id, "gpu:1"); err != nil {
			t.Fatal(err)
		}
	}
	res2, err := e.gc()
	if err != nil || !slices.Equal(res2.Freed, []string{"bad", "good"}) || len(res2.Errors) != 1 || !strings.Contains(res2.Errors[0], "helper refused") {
		t.Errorf("GC = %+v, %v", res2, err)
	}
	if got := e.records(); len(got) != 0 {
		t.Errorf("after GC the store holds %v", got)
	}
}

// TestHoldLimit: a hook that blocks is cut off by the deadline. ADD then
// undoes what it set up and records nothing; GC frees what it reached and
// leaves the rest for the next run. The work that must fit in the hold
// (a hook that returns at once, an undo, a commit) measured under 1 ms
// here; the hold is over ten times the slowest ADD measured with a fresh
// store (94 ms), and the blocked hooks wait it out.
func TestHoldLimit(t *testing.T) {
	e := newEnv(t, gpus(0, 0, 0, 0))
	r := &recorder{failItem: 2, block: true}
	e.pool.Setup = setupFuncs{r.handout, r.teardown}
	e.pool.hold = 2 * time.Second
	if _, err := e.add("a", "gpu:1,gpu-mem:1"); code(err) != protocol.CodeSetup || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("blocked Handout: %v", err)
	}
	if !slices.Equal(r.undone, []string{"gpu"}) || len(e.records()) != 0 {
		t.Errorf("undone %v, store %v", r.undone, e.records())
	}

	r.failItem, r.block = 0, false
	for _, id := range []string{"x", "y", "z"} {
		if _, err := e.add(id, "gpu:1"); err != nil {
			t.Fatal(err)
		}
	}
	r.block = true
	res, err := e.gc()
	if err != nil || !slices.Equal(res.Freed, []string{"x"}) || len(res.Errors) != 2 ||
		!strings.Contains(res.Errors[1], "2 request-ids left for the next GC") {
		t.Errorf("GC past the deadline = %+v, %v", res, err)
	}
	if got := e.records(); len(got) != 2 {
		t.Errorf("store after a cut-off GC: %v", got)
	}
}

// TestDiscoverInTransaction: ADD's Discover runs inside the transaction
// and sees who holds what, so a plugin may set the host up there (sriov).
func TestDiscoverInTransaction(t *testing.T) {
	e := newEnv(t, gpus(0, 0))
	var held []bool
	e.pool.Discoverer = discoverFunc(func(ctx context.Context, c *skel.Call, scan Scan) ([]Device, error) {
		held = append(held, scan.Held("g0"))
		return e.host.devs, nil
	})
	e.run(0, step{id: "a", request: "gpu:1", devices: []string{"/dev/g0"}, local: []int{0}})
	e.run(1, step{id: "b", request: "gpu:1", devices: []string{"/dev/g1"}, local: []int{0}})
	if !slices.Equal(held, []bool{false, true}) {
		t.Errorf("Discover saw g0 held: %v", held)
	}
}

func TestDevicesShowsHolders(t *testing.T) {
	e := newEnv(t, gpus(0, 0))
	c := e.call(protocol.CmdDevices, "", "", nil)
	if _, err := e.pool.Devices(context.Background(), c); code(err) != protocol.CodeCommandUnsupported {
		t.Errorf("DEVICES without Inventory: %v", err)
	}
	e.pool.Lister = listFunc(func(context.Context, *skel.Call) ([]protocol.DeviceInfo, error) {
		return []protocol.DeviceInfo{{Key: "g0", Usable: true}, {Key: "g1", Usable: true}}, nil
	})
	devs, err := e.pool.Devices(context.Background(), c)
	if err != nil || devs[0].HeldBy != "" || devs[1].HeldBy != "" {
		t.Errorf("DEVICES without a store = %+v, %v", devs, err)
	}
	e.run(0, step{id: "a", request: "gpu:1", devices: []string{"/dev/g0"}, local: []int{0}})
	devs, err = e.pool.Devices(context.Background(), c)
	if err != nil || devs[0].HeldBy != "a" || devs[1].HeldBy != "" {
		t.Errorf("DEVICES = %+v, %v", devs, err)
	}
}

func TestStrictNUMA(t *testing.T) {
	for policy, want := range map[string]bool{"": false, "preferred": false, "strict": true} {
		if got, err := StrictNUMA(policy); err != nil || got != want {
			t.Errorf("StrictNUMA(%q) = %v, %v", policy, got, err)
		}
	}
	if _, err := StrictNUMA("loose"); err == nil {
		t.Error("StrictNUMA accepted \"loose\"")
	}
}

// specEnv is an env whose pool publishes CDI specs into a temporary dir.
func specEnv(t *testing.T) *env {
	e := newEnv(t, gpus(0, 0, 0))
	spec, err := Args(protocol.Config{Args: []byte(`{"cdi_spec":{"kind":"example.com/gpu","dir":"` + t.TempDir() + `"}}`)}, &struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	e.pool.Spec = spec
	return e
}

// owner is the spec owner of the env's store.
func (e *env) owner() cdispec.Owner {
	e.t.Helper()
	st, err := store.Open(store.Path(e.state, e.pool.Name), store.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	defer st.Close()
	o := cdispec.Owner{Plugin: e.pool.Name}
	if err := st.View(func(tx *store.Tx) error { o.Store = tx.ID(); return nil }); err != nil {
		e.t.Fatal(err)
	}
	return o
}

func (e *env) specNodes(id string) []string {
	e.t.Helper()
	b, err := os.ReadFile(e.pool.Spec.config().Path(e.owner(), id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var nodes []string
	for _, f := range strings.Split(string(b), `"path": "`)[1:] {
		nodes = append(nodes, f[:strings.IndexByte(f, '"')])
	}
	return nodes
}

func TestPublish(t *testing.T) {
	e := specEnv(t)
	res, err := e.add("a", "gpu:2")
	if err != nil || !slices.Equal(res.CDIDevices, []string{"example.com/gpu=a"}) {
		t.Fatalf("ADD = %+v, %v", res, err)
	}
	// The request's own device, then one per device (KeyDeviceName).
	if got := e.specNodes("a"); !slices.Equal(got, []string{"/dev/g0", "/dev/g1", "/dev/g0", "/dev/g1"}) {
		t.Errorf("spec of a lists %v", got)
	}
	t.Logf("cdiKeyDevices %v", res.CDIKeyDevices)
	if len(res.CDIKeyDevices) != 2 {
		t.Errorf("ADD names the devices' own CDI devices %v", res.CDIKeyDevices)
	}
	for k, name := range res.CDIKeyDevices {
		if name != "example.com/gpu=a_"+k {
			t.Errorf("device %s's own CDI device is %q", k, name)
		}
	}

	// A replay rewrites a spec that is missing (a crash after the commit).
	os.Remove(e.pool.Spec.config().Path(e.owner(), "a"))
	if _, err := e.add("a", "gpu:2"); err != nil || e.specNodes("a") == nil {
		t.Errorf("replay did not rewrite the spec: %v", err)
	}

	// An orphan (a crash after a DEL's commit) goes at the next ADD;
	// another store's file of the same kind stays.
	if err := e.pool.Spec.config().Write(e.owner(), "ghost", nil, nil); err != nil {
		t.Fatal(err)
	}
	other := cdispec.Owner{Plugin: "fake", Store: "0123"}
	if err := e.pool.Spec.config().Write(other, "elsewhere", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.add("b", "gpu:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.pool.Spec.config().Path(e.owner(), "ghost")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphan kept: %v", err)
	}
	if _, err := os.Stat(e.pool.Spec.config().Path(other, "elsewhere")); err != nil {
		t.Errorf("another store's spec removed: %v", err)
	}

	// DEL and GC remove the files of what they free.
	if err := e.del("a"); err != nil || e.specNodes("a") != nil {
		t.Errorf("DEL: %v; spec %v", err, e.specNodes("a"))
	}
	if res, err := e.gc(); err != nil || len(res.Freed) != 1 || e.specNodes("b") != nil {
		t.Errorf("GC = %+v, %v; spec %v", res, err, e.specNodes("b"))
	}
}

// TestPublishFailure: when the spec cannot be written, ADD fails with 107
// and takes back what it allocated, setup included; what an earlier ADD
// of the same request holds stays.
func TestPublishFailure(t *testing.T) {
	e := specEnv(t)
	r := &recorder{}
	e.pool.Setup = setupFuncs{handout: r.handout}
	if _, err := e.add("a", "gpu:1"); err != nil {
		t.Fatal(err)
	}
	blocked := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.pool.Spec.c.Dir = blocked
	if _, err := e.add("a", "gpu:1,gpu-mem:1"); code(err) != protocol.CodeSetup {
		t.Errorf("ADD with an unwritable spec dir: %v", err)
	}
	if got := e.records(); !slices.Equal(got["a"], []string{"g0"}) || len(got) != 1 {
		t.Errorf("store after the failure: %v", got)
	}
	if !slices.Equal(r.undone, []string{"gpu-mem"}) {
		t.Errorf("undone %v; want the new item's setup only", r.undone)
	}
}

// TestSettleFailure: when the spec cannot be made durable after the
// store's lock is released (here another store's file of the request-id
// appears then, which takes the same way as a failed fsync), ADD fails
// with 107 and takes back, in a new hold, its spec, what it allocated and
// its setup; what an earlier ADD of the request holds stays. When a DEL
// or an ADD of the request-id ran in between, what it decided stays.
func TestSettleFailure(t *testing.T) {
	tests := []struct {
		name    string
		between func(e *env) // after ADD's hold, before it settles
		records []string     // what a holds afterwards
		undone  []string     // the setups undone
		spec    []string     // the nodes of a's spec afterwards
		msg     string       // in the error
	}{
		{name: "alone", between: func(*env) {},
			records: []string{"g0"}, undone: []string{"gpu-mem"}, spec: nil, msg: "writing CDI spec"},
		{name: "a DEL in between", between: func(e *env) {
			if err := e.del("a"); err != nil {
				e.t.Fatal(err)
			}
		}, records: nil, undone: nil, spec: nil, msg: "the allocation stays"},
		{name: "a replay in between", between: func(e *env) {
			if _, err := e.add("a", "gpu:1,gpu-mem:1"); err != nil {
				e.t.Fatal(err)
			}
		}, records: []string{"g0", "g1"}, undone: nil, spec: []string{"/dev/set-up-g0", "/dev/set-up-g1"}, msg: "the allocation stays"},
		// A DEL that committed but could not remove the spec (its removal
		// is only a warning): the file is still this ADD's, the record is
		// gone, and the setup is left alone, for a later ADD may hold the
		// devices.
		{name: "a record gone, its spec left", between: func(e *env) {
			st, err := store.Open(store.Path(e.state, "fake"), store.Options{Timeout: time.Second})
			if err != nil {
				e.t.Fatal(err)
			}
			defer st.Close()
			if err := st.Update(func(tx *store.Tx) error { _, err := tx.Delete("a"); return err }); err != nil {
				e.t.Fatal(err)
			}
		}, records: nil, undone: nil, spec: nil, msg: "writing CDI spec"},
	}
	for _, tt := range tests {
		e := specEnv(t)
		r := &recorder{}
		e.pool.Setup = setupFuncs{handout: r.handout}
		if _, err := e.add("a", "gpu:1"); err != nil {
			t.Fatal(err)
		}
		c := e.call(protocol.CmdAdd, "a", "gpu:1,gpu-mem:1", nil)
		pub := e.pool.Spec.config().Stage()
		a, _, err := e.pool.add(context.Background(), c, pub)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		tt.between(e)
		// Another store writes the name (its own checks would refuse it
		// while this store's file is there: it goes in by hand).
		other := cdispec.Owner{Plugin: "fake", Store: "0123"}
		if err := os.WriteFile(e.pool.Spec.config().Path(other, "a"), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		err = a.settle(context.Background(), pub)
		pub.Close()
		if code(err) != protocol.CodeSetup || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: settle = %v; want 107 with %q", tt.name, err, tt.msg)
		}
		if got := e.records()["a"]; !slices.Equal(got, tt.records) {
			t.Errorf("%s: a holds %v, want %v", tt.name, got, tt.records)
		}
		if !slices.Equal(r.undone, tt.undone) {
			t.Errorf("%s: undone %v, want %v", tt.name, r.undone, tt.undone)
		}
		if got := e.specNodes("a"); !slices.Equal(got[:min(len(got), 2)], tt.spec) {
			t.Errorf("%s: spec of a lists %v, want %v first", tt.name, got, tt.spec)
		}
		if _, err := os.Stat(e.pool.Spec.config().Path(other, "a")); err != nil {
			t.Errorf("%s: the other store's spec: %v", tt.name, err)
		}
	}
}

func TestArgs(t *testing.T) {
	var a struct {
		K int `json:"k"`
	}
	tests := []struct {
		args string
		ok   bool
		kind string
	}{
		{`{"k":1}`, true, ""},
		{`{"k":1,"cdi_spec":{"kind":"example.com/gpu"}}`, true, "example.com/gpu"},
		{`{"k":1,"cdi_spec":{"kind":"gpu"}}`, false, ""},
		{`{"k":1,"cdi_spec":{"kind":"example.com/gpu","dir":"rel"}}`, false, ""},
		{`{"kk":1,"cdi_spec":{"kind":"example.com/gpu"}}`, false, ""},
		{`{"k":"cdi_spec"}`, false, ""},
		// Names match exactly, once (rawjson.DecodeStrict).
		{`{"k":1,"cdi_spec":{"Kind":"example.com/gpu"}}`, false, ""},
		{`{"k":1,"cdi_spec":{"kind":"example.com/gpu","DIR":"/x"}}`, false, ""},
		{`{"k":1,"cdi_spec":{"kind":"example.com/gpu"},"cdi_spec":{"kind":"example.com/tty"}}`, false, ""},
		{`{"k":1,"CDI_SPEC":{"kind":"example.com/gpu"}}`, false, ""},
		{`{"k":1,"K":2,"cdi_spec":{"kind":"example.com/gpu"}}`, false, ""},
		{`{"k":1,"k":2,"cdi_spec":{"kind":"example.com/gpu"}}`, false, ""},
	}
	for _, tt := range tests {
		spec, err := Args(protocol.Config{Args: []byte(tt.args)}, &a)
		if (err == nil) != tt.ok || tt.ok && (spec == nil) != (tt.kind == "") || spec != nil && spec.Kind() != tt.kind {
			t.Errorf("Args(%s) = %+v, %v", tt.args, spec, err)
		}
	}
}

// TestAddLiveCheck: a chosen device that fails its live check (Resolve)
// makes ADD discover again, reading the host (Scan.Rescan), and choose
// among what that found; a device that fails after the rescan is left
// out and the choice made again. Nothing is handed out unchecked.
func TestAddLiveCheck(t *testing.T) {
	gone := errors.New("its class link now leads elsewhere")
	tests := []struct {
		name    string
		cached  []string // what discovery from the cache lists, in order
		fresh   []string // what a rescan lists
		failing []string // devices whose check fails whatever the scan
		amount  int
		want    []string // nodes handed out; nil for code 103
		rescans int
	}{
		{"cache hit", []string{"g0", "g1"}, []string{"g0", "g1"}, nil, 1, []string{"/dev/g0"}, 0},
		{"stale entry", []string{"g0", "g1", "g2"}, []string{"g1", "g2"}, nil, 2, []string{"/dev/g1", "/dev/g2"}, 1},
		{"bad device on the host", []string{"g0", "g1", "g2"}, []string{"g0", "g1", "g2"}, []string{"g0"}, 1, []string{"/dev/g1"}, 1},
		{"too few left", []string{"g0", "g1"}, []string{"g1"}, nil, 2, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, &host{})
			rescans := 0
			e.pool.Discoverer = discoverFunc(func(_ context.Context, _ *skel.Call, scan Scan) ([]Device, error) {
				keys := tt.cached
				if scan.Rescan {
					rescans++
					keys = tt.fresh
				}
				var out []Device
				for i, k := range keys {
					d := Device{Key: k, Index: i, NUMA: 0, Nodes: []string{"/dev/" + k}}
					bad := slices.Contains(tt.failing, k) || !scan.Rescan && !slices.Contains(tt.fresh, k)
					d.Live = resolveFunc(func() ([]string, error) {
						if bad {
							return nil, gone
						}
						return []string{"/dev/" + k}, nil
					})
					out = append(out, d)
				}
				return out, nil
			})
			res, err := e.add("a", fmt.Sprintf("gpu:%d", tt.amount))
			switch {
			case tt.want == nil && code(err) != protocol.CodeInsufficient:
				t.Errorf("ADD = %v, %v; want code 103", res, err)
			case tt.want != nil && (err != nil || !slices.Equal(res.Devices, tt.want)):
				t.Errorf("ADD = %v, %v; want %v", res, err, tt.want)
			}
			if rescans != tt.rescans {
				t.Errorf("%d rescans, want %d", rescans, tt.rescans)
			}
		})
	}
}

// TestPinnedLiveCheck: a pinned device that fails its live check even
// after the rescan is refused as not usable, with what the check found,
// not as held by another request.
func TestPinnedLiveCheck(t *testing.T) {
	e := newEnv(t, &host{})
	e.pool.Discoverer = discoverFunc(func(_ context.Context, _ *skel.Call, scan Scan) ([]Device, error) {
		return []Device{{Key: "g0", NUMA: 0, Nodes: []string{"/dev/g0"},
			Live: resolveFunc(func() ([]string, error) { return nil, errors.New("its node is not the device sysfs describes") })}}, nil
	})
	e.pool.Lister = listFunc(func(context.Context, *skel.Call) ([]protocol.DeviceInfo, error) {
		return []protocol.DeviceInfo{{Key: "g0", Reason: "its node is not the device sysfs describes"}}, nil
	})
	c := e.call(protocol.CmdAdd, "a", "gpu:1", nil)
	c.Pinned = []string{"g0"}
	_, err := e.pool.Add(context.Background(), c)
	if code(err) != protocol.CodeInsufficient || strings.Contains(err.Error(), "held") || !strings.Contains(err.Error(), "sysfs describes") {
		t.Fatalf("ADD = %v", err)
	}
}

// TestSpecDevices: each device's own spec entry has its nodes, and the
// shared nodes of its allocation; a Handout's nodes, which are no
// device's, go with every device.
func TestSpecDevices(t *testing.T) {
	paths := func(d cdispec.Device) []string {
		var out []string
		for _, n := range d.Nodes {
			out = append(out, n.Path)
		}
		return out
	}
	got := specDevices(t.TempDir(), []store.Allocation{
		{Devices: []store.Device{{Key: "a", Nodes: []string{"/dev/dri/card0"}}, {Key: "b", Nodes: []string{"/dev/dri/card1"}}}},
		{Nodes: []string{"/dev/dri/card2", "/dev/kfd"}, Devices: []store.Device{{Key: "c", Nodes: []string{"/dev/dri/card2"}}}},
		{Nodes: []string{"/dev/vfio/7", "/dev/vfio/vfio"}, Devices: []store.Device{{Key: "d", Nodes: []string{"/dev/x"}}, {Key: "e"}}},
	})
	want := map[string][]string{
		"a": {"/dev/dri/card0"}, "b": {"/dev/dri/card1"}, "c": {"/dev/dri/card2", "/dev/kfd"},
		"d": {"/dev/vfio/7", "/dev/vfio/vfio"}, "e": {"/dev/vfio/7", "/dev/vfio/vfio"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d devices, want %d", len(got), len(want))
	}
	for _, d := range got {
		if !slices.Equal(paths(d), want[d.Key]) {
			t.Errorf("%s: %v, want %v", d.Key, paths(d), want[d.Key])
		}
	}
}
