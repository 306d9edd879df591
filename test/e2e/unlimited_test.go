package e2e

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdi-exec/plugins/internal/chardev"
	kubeinv "github.com/cdi-exec/plugins/internal/kubelet/inventory"
	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/test/fixture"
)

// kvmUnlimitedConf is a generic config of /dev/kvm that any number of
// requests may hold at once.
const kvmUnlimitedConf = `{"cdiVersion":"0.0.2","name":"kvm","type":"kvm","plugin":"generic","args":{"rules":[{"paths":["/dev/kvm"],"shares":"unlimited"}]}}`

// unlimitedNode is a host with /dev/kvm, for a rule of unlimited shares.
func unlimitedNode(t *testing.T) *node {
	t.Helper()
	needRealNodes(t)
	return newNode(t, fixture.Host{Misc: []fixture.Misc{fixture.KVM}})
}

// Fifty requests, four at a time, each hold a share of kvm at once: each
// gets /dev/kvm and a share of its own, the lowest free ones, kvm and
// kvm/1 to kvm/49; INFO says math.MaxInt32 throughout; DEVICES says
// unlimited, no shares, and one holder per held share, in share order.
// DEL frees: the next request takes the lowest freed share, and with
// every request gone the store holds nothing.
func TestGenericUnlimitedShares(t *testing.T) {
	n := unlimitedNode(t)
	const requests, workers = 50, 4
	info := func() any { return n.run("generic", kvmUnlimitedConf, "CDI_COMMAND=INFO").obj(t)["kvm"] }
	if got := info(); got != float64(math.MaxInt32) {
		t.Fatalf("INFO kvm = %v, want %d", got, math.MaxInt32)
	}
	ids := make(chan string)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for id := range ids {
				r := n.run("generic", kvmUnlimitedConf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:1", "CDI_REQUEST_ID="+id)
				if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/kvm" {
					t.Errorf("ADD %s: %d %s %s", id, r.status, r.stdout, r.stderr)
				}
			}
		})
	}
	for i := range requests {
		ids <- fmt.Sprintf("vm%d", i)
	}
	close(ids)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	recs := n.records("generic")
	var keys []string
	for id, rec := range recs {
		if devs := rec.Devices(); len(devs) != 1 {
			t.Errorf("%s holds %d shares, want 1", id, len(devs))
		}
		keys = append(keys, rec.Devices()[0].Key)
	}
	var want []string
	for i := range requests {
		want = append(want, pool.ShareKey("kvm", i))
	}
	slices.Sort(keys)
	slices.Sort(want)
	if len(recs) != requests || !slices.Equal(keys, want) {
		t.Fatalf("%d records hold %v, want %v", len(recs), keys, want)
	}
	if got := info(); got != float64(math.MaxInt32) {
		t.Errorf("INFO kvm with %d held = %v, want %d (capacity, not what is free)", requests, got, math.MaxInt32)
	}
	inv := n.inventory("generic", kvmUnlimitedConf)
	if len(inv) != 1 || !inv[0].Unlimited || inv[0].Shares != 0 || inv[0].HeldBy != "" || !inv[0].Usable {
		t.Fatalf("DEVICES: %+v", inv)
	}
	if holders := holdersInShareOrder(recs, requests); !slices.Equal(inv[0].Holders, holders) || slices.Contains(holders, "") {
		t.Fatalf("DEVICES holders %v, want one per held share in share order %v", inv[0].Holders, holders)
	}
	out := n.run("generic", kvmUnlimitedConf, "CDI_COMMAND=DEVICES").stdout
	if !strings.Contains(out, `"unlimited": true`) || strings.Contains(out, `"shares"`) {
		t.Errorf("DEVICES answer: %s", out)
	}

	// DEL frees the share; the next request takes the lowest free one.
	freed := holderOf(recs, "kvm/7")
	if r := n.run("generic", kvmUnlimitedConf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+freed); r.status != 0 || r.stdout != "" {
		t.Fatalf("DEL %s: %s", freed, r.stdout)
	}
	if r := n.run("generic", kvmUnlimitedConf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:1", "CDI_REQUEST_ID=late"); r.status != 0 {
		t.Fatalf("ADD after DEL: %s", r.stdout)
	}
	if k := n.records("generic")["late"].Devices()[0].Key; k != "kvm/7" {
		t.Errorf("late holds %s, want the freed kvm/7", k)
	}
	for id := range n.records("generic") {
		if r := n.run("generic", kvmUnlimitedConf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+id); r.status != 0 {
			t.Fatalf("DEL %s: %s", id, r.stdout)
		}
	}
	if recs := n.records("generic"); len(recs) != 0 {
		t.Errorf("after every DEL the store holds %v", recs)
	}
	if inv := n.inventory("generic", kvmUnlimitedConf); len(inv) != 1 || len(inv[0].Holders) != 0 {
		t.Errorf("DEVICES after every DEL: %+v", inv)
	}
}

// holderOf is the request-id holding key among recs, "" for none.
func holderOf(recs map[string]*store.Record, key string) string {
	for id, rec := range recs {
		if slices.ContainsFunc(rec.Devices(), func(d store.Device) bool { return d.Key == key }) {
			return id
		}
	}
	return ""
}

// holdersInShareOrder lists the holder of shares 0..n-1 of kvm.
func holdersInShareOrder(recs map[string]*store.Record, n int) []string {
	var out []string
	for i := range n {
		out = append(out, holderOf(recs, pool.ShareKey("kvm", i)))
	}
	return out
}

// One request may hold several shares of a unit of unlimited shares: by
// count (kvm:3), it holds three shares and gets the node once; pinned,
// naming the unit twice, it holds two more, the lowest free ones, and a
// replay holds the same. Another request is never refused for want of a
// share.
func TestGenericUnlimitedSeveralShares(t *testing.T) {
	n := unlimitedNode(t)
	r := n.run("generic", kvmUnlimitedConf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:3", "CDI_REQUEST_ID=big")
	if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/kvm" {
		t.Fatalf("kvm:3: %s", r.stdout)
	}
	pinned := []string{"CDI_COMMAND=ADD", "CDI_REQUEST=kvm:2", "CDI_REQUEST_ID=twice", "CDI_REQUEST_DEVICES=kvm,kvm"}
	for _, what := range []string{"pinned ADD", "its replay"} {
		r = n.run("generic", kvmUnlimitedConf, pinned...)
		if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/kvm" {
			t.Fatalf("%s naming kvm twice: %s %s", what, r.stdout, r.stderr)
		}
		recs := n.records("generic")
		if got := shareKeys(recs["big"]); !slices.Equal(got, []string{"kvm", "kvm/1", "kvm/2"}) {
			t.Fatalf("after the %s big holds %v", what, got)
		}
		if got := shareKeys(recs["twice"]); !slices.Equal(got, []string{"kvm/3", "kvm/4"}) {
			t.Fatalf("after the %s twice holds %v", what, got)
		}
	}
	// A replay naming the unit a different number of times is a conflict.
	if r := n.run("generic", kvmUnlimitedConf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:3", "CDI_REQUEST_ID=twice", "CDI_REQUEST_DEVICES=kvm,kvm,kvm"); r.code(t) != 104 {
		t.Errorf("a changed pinned replay: %s", r.stdout)
	}
	if r := n.run("generic", kvmUnlimitedConf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:1", "CDI_REQUEST_ID=small", "CDI_REQUEST_DEVICES=kvm"); r.status != 0 {
		t.Fatalf("a third request: %s", r.stdout)
	}
	inv := n.inventory("generic", kvmUnlimitedConf)
	if len(inv) != 1 || strings.Join(inv[0].Holders, ",") != "big,big,big,twice,twice,small" {
		t.Errorf("DEVICES: %+v", inv)
	}
	// More than an ADD may take of one unit at once is not enough (103).
	if r := n.run("generic", kvmUnlimitedConf, "CDI_COMMAND=ADD", fmt.Sprintf("CDI_REQUEST=kvm:%d", chardev.MaxTake+1), "CDI_REQUEST_ID=huge"); r.code(t) != 103 {
		t.Errorf("kvm:%d: %s", chardev.MaxTake+1, r.stdout)
	}
	if _, ok := n.records("generic")["huge"]; ok {
		t.Error("a refused ADD holds shares")
	}
}

// shareKeys are the keys a record holds, sorted by share.
func shareKeys(rec *store.Record) []string {
	var out []string
	for _, d := range rec.Devices() {
		out = append(out, d.Key)
	}
	slices.SortFunc(out, func(a, b string) int {
		_, i := pool.ShareOf(a)
		_, j := pool.ShareOf(b)
		return i - j
	})
	return out
}

// cdictl devices says a unit's shares are unlimited, and counts the
// shares held, in its table and its JSON.
func TestCdictlDevicesUnlimited(t *testing.T) {
	needRealNodes(t)
	n := newCtlNode(t, fixture.Host{Misc: []fixture.Misc{fixture.KVM}}, map[string]string{"kvm.d/generic.conf": kvmUnlimitedConf})
	r := n.ctl("devices", "kvm", "-o", "table", "--no-headers")
	if got := strings.Join(strings.Fields(r.stdout), " "); r.status != 0 || got != "kvm generic kvm /dev/kvm - - - - free (unlimited shares)" {
		t.Fatalf("devices: %d %q %s", r.status, got, r.stderr)
	}
	for _, add := range [][2]string{{"vm-1", "kvm:1"}, {"vm-2", "kvm:2"}} {
		if r := n.ctl("add", "--id", add[0], add[1]); r.status != 0 {
			t.Fatalf("add %v: %d %s %s", add, r.status, r.stdout, r.stderr)
		}
	}
	r = n.ctl("devices", "kvm", "-o", "table", "--no-headers")
	if got := strings.Join(strings.Fields(r.stdout), " "); r.status != 0 || got != "kvm generic kvm /dev/kvm - - - - 3 of unlimited shares held by vm-1, vm-2 (2)" {
		t.Fatalf("devices: %d %q %s", r.status, got, r.stderr)
	}
	var out struct {
		Plugins []struct {
			Devices []struct {
				Shares    int
				Unlimited bool
				Holders   []string
			}
		}
	}
	n.ctl("devices", "kvm", "-o", "json").json(t, &out)
	if d := out.Plugins[0].Devices[0]; d.Shares != 0 || !d.Unlimited || strings.Join(d.Holders, ",") != "vm-1,vm-2,vm-2" {
		t.Fatalf("devices JSON: %+v", out)
	}
}

// The device-plugin mode, which has no API client, offers a unit of
// unlimited shares as the kubelet's default --max-pods, 110 device ids,
// kvm, kvm-s1, ..., kvm-s109; a container allocated two of them holds
// one share, as with numbered shares.
func TestKubeletPluginGenericUnlimited(t *testing.T) {
	needRealNodes(t)
	n := newCtlNode(t, fixture.Host{Misc: []fixture.Misc{fixture.KVM}}, map[string]string{"kvm.d/generic.conf": kvmUnlimitedConf})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, first, logs := startKVMDevicePlugin(ctx, t, n)
	var ids, want []string
	for _, d := range first.Devices {
		if d.Health == api.Healthy {
			ids = append(ids, d.ID)
		}
	}
	for i := range kubeinv.DefaultMaxPods {
		want = append(want, kubeinv.ShareKey("kvm", i))
	}
	want[0] = "kvm"
	if !slices.Equal(ids, want) {
		t.Fatalf("%d devices %v, want %d", len(ids), ids, len(want))
	}
	resp, err := c.Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{"kvm-s7", "kvm-s9"}}}})
	if err != nil {
		t.Fatalf("Allocate: %v\n%s", err, logs.String())
	}
	if cdi := resp.ContainerResponses[0].CdiDevices; len(cdi) != 1 {
		t.Fatalf("Allocate: CDI devices %v", cdi)
	}
	recs := n.records("generic")
	if len(recs) != 1 {
		t.Fatalf("records %v", recs)
	}
	for _, rec := range recs {
		if got := shareKeys(rec); !slices.Equal(got, []string{"kvm"}) {
			t.Errorf("the allocation holds %v", got)
		}
	}
}

// cdictl info sums a type's capacity over its configs, stopping at the
// most a count can be: two configs of unlimited kvm are 2147483647.
func TestCdictlInfoUnlimited(t *testing.T) {
	needRealNodes(t)
	n := newCtlNode(t, fixture.Host{Misc: []fixture.Misc{fixture.KVM}}, map[string]string{
		"kvm.d/a.conf": kvmUnlimitedConf,
		"kvm.d/b.conf": strings.Replace(kvmUnlimitedConf, `"name":"kvm"`, `"name":"kvm2"`, 1),
	})
	var out map[string]any
	n.ctl("info", "kvm", "-o", "json").json(t, &out)
	if out["kvm"] != float64(math.MaxInt32) {
		t.Fatalf("info: %v", out)
	}
}
