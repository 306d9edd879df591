package dra

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cdi-exec/plugins/internal/kubelet/claimstate"
	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/test/fixture"
)

const kvmDriver = "kvm.cdi-exec.io"

// kvmConf is a generic config of /dev/kvm with three shares.
const kvmConf = `{"cdiVersion":"0.0.2","name":"kvm","type":"kvm","plugin":"generic","args":{"rules":[{"paths":["/dev/kvm"],"shares":3}]}}`

// needNodes skips a test of the generic plugin where this machine cannot
// make real device nodes.
func needNodes(t *testing.T) {
	t.Helper()
	if got := fixture.NodesIn(t.TempDir()); got != fixture.RealNodes {
		t.Skipf("needs real device nodes (CAP_MKNOD), and this machine makes %s: the generic plugin finds path rules' devices by number", got)
	}
}

// noConsumableCapacity makes the fake API server one without consumable
// capacity (1.35, DRAConsumableCapacity off): it drops each device's
// allowMultipleAllocations and its capacities' requestPolicy from the
// ResourceSlices written, and stores what is left, as the real one does.
func noConsumableCapacity(c *fake.Clientset) {
	gvr := resourceapi.SchemeGroupVersion.WithResource("resourceslices")
	var serial atomic.Int64
	strip := func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(interface{ GetObject() runtime.Object }).GetObject().(*resourceapi.ResourceSlice).DeepCopy()
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			d.AllowMultipleAllocations = nil
			for name, c := range d.Capacity {
				c.RequestPolicy = nil
				d.Capacity[name] = c
			}
		}
		if a.GetVerb() == "create" {
			if s.Name == "" {
				s.Name = fmt.Sprintf("%sdropped-%05d", s.GenerateName, serial.Add(1))
			}
			return true, s, c.Tracker().Create(gvr, s, "")
		}
		return true, s, c.Tracker().Update(gvr, s, "")
	}
	c.PrependReactor("create", "resourceslices", strip)
	c.PrependReactor("update", "resourceslices", strip)
}

// shareClaim creates a claim allocated shares of the kvm unit, one
// result per entry of consumed (0: the result names no consumed
// capacity, and the requestPolicy's default of one applies), each with a
// shareID of its own, as the scheduler allocates a device with
// allowMultipleAllocations.
func (n *node) shareClaim(name, uid string, consumed ...int64) *resourceapi.ResourceClaim {
	n.t.Helper()
	var results []resourceapi.DeviceRequestAllocationResult
	for i, k := range consumed {
		id := types.UID(fmt.Sprintf("%s-share-%d", name, i))
		r := resourceapi.DeviceRequestAllocationResult{Request: fmt.Sprint("r", i), Driver: kvmDriver, Device: "kvm", ShareID: &id}
		if k > 0 {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]apiresource.Quantity{capShares: *apiresource.NewQuantity(k, apiresource.DecimalSI)}
		}
		results = append(results, r)
	}
	return n.allocatedClaim(name, uid, results)
}

// kvmUnit returns the kvm unit's DEVICES entry: its shares and holders.
func (n *node) kvmUnit() (shares int, holders []string) {
	n.t.Helper()
	confs, _ := caller.Load(n.conf)
	devs, err := inventory.Devices(context.Background(), caller.Caller{Path: binDir, Timeout: 20 * time.Second}, caller.OfType(confs, "kvm")[0])
	if err != nil {
		n.t.Fatal(err)
	}
	for _, d := range devs {
		if d.Key == "kvm" {
			return d.Shares, d.Holders
		}
	}
	n.t.Fatal("DEVICES does not list kvm")
	return 0, nil
}

// checkKVM checks a prepare's answer: no error, and every device gives the
// container /dev/kvm.
func (n *node) checkKVM(what string, got interface {
	GetError() string
}, ids [][]string) {
	n.t.Helper()
	if got.GetError() != "" {
		n.t.Fatalf("prepare %s: %s", what, got.GetError())
	}
	for _, id := range ids {
		if nodes := n.specNodes(id); strings.Join(nodes, " ") != "/dev/kvm" {
			n.t.Fatalf("prepare %s: the container gets %v", what, nodes)
		}
	}
}

// The generic plugin through the DRA driver, on an API server without
// consumable capacity (1.35): kvm with three shares is three devices in
// the slice (kvm, and kvm-s1, kvm-s2 by their names), three claims each
// prepare one share and get /dev/kvm; a serial adapter carries its USB
// serial as an attribute for CEL selectors.
func TestGenericSharesAndAttributes(t *testing.T) {
	needNodes(t)
	const serialDriver = "usbserial.cdi-exec.io"
	n := newNode(t, fixture.GenericDevices(), map[string]string{
		"kvm.d/generic.conf":       kvmConf,
		"usbserial.d/generic.conf": `{"cdiVersion":"0.0.2","name":"s","type":"usbserial","plugin":"generic","args":{"rules":[{"paths":["/dev/ttyUSB*"],"usb":{"vendor":"1a86"}}]}}`,
	})
	noConsumableCapacity(n.client)
	n.start(n.options())
	kvms := n.waitSlice(kvmDriver, []string{"kvm", "x-kvm-0s1", "x-kvm-0s2"})
	for _, d := range kvms {
		if d.AllowMultipleAllocations != nil || len(d.Capacity) != 0 {
			t.Fatalf("a share device on a server without consumable capacity: %+v", d)
		}
	}
	serials := n.waitSlice(serialDriver, []string{"x-1a86-27523-2-a50285-b-i", "x-1a86-27523-2-b71234-x-y", "x-1a86-27523-2port-01-03"})
	if v := serials[1].Attributes["usbSerial"].StringValue; v == nil || *v != "B71234XY" {
		t.Errorf("usbSerial of %s: %v", serials[1].Name, serials[1].Attributes)
	}
	if v := serials[0].Attributes["class"].StringValue; v == nil || *v != "tty" {
		t.Errorf("class of %s: %v", serials[0].Name, serials[0].Attributes)
	}
	for i, dev := range []string{"x-kvm-0s2", "kvm", "x-kvm-0s1"} {
		c := n.claim("vm"+dev, uid(100+i), kvmDriver, dev)
		got := n.prepare(kvmDriver, c)
		if len(got.Devices) != 1 || len(got.Devices[0].CdiDeviceIds) != 1 {
			t.Fatalf("prepare %s: %+v (%s)", dev, got.Devices, got.Error)
		}
		n.checkKVM(dev, got, [][]string{got.Devices[0].CdiDeviceIds})
	}
	// Every share is held, each by one claim; a claim for a share device
	// held already (the scheduler would not make it) fails.
	c := n.claim("vm-extra", uid(200), kvmDriver, "kvm")
	if got := n.prepare(kvmDriver, c); got.Error == "" {
		t.Fatalf("a fourth share: %+v", got.Devices)
	}
}

// TestGenericSharesConsumable: on an API server with consumable capacity
// (1.36+), kvm with three shares is one device that many claims may be
// allocated, of capacity "shares" 3 with a requestPolicy of one share by
// default and up to 3. A claim of one share and a claim of two results
// of one share each hold the plugin's three slots, the second recorded
// with its two shareIDs; a fourth share fails and leaves no record;
// replaying a prepared claim's ADD names the same slots; once the
// two-result claim is unprepared, a claim of one result consuming two
// shares prepares. A share held outside Kubernetes leaves the capacity
// one lower at the next poll.
func TestGenericSharesConsumable(t *testing.T) {
	needNodes(t)
	n := newNode(t, fixture.GenericDevices(), map[string]string{"kvm.d/generic.conf": kvmConf})
	in := n.start(n.options())
	devs := n.waitSlice(kvmDriver, []string{"kvm"})
	checkCapacity(t, devs[0], 3)

	one := n.shareClaim("one", uid(300), 0)
	got := n.prepare(kvmDriver, one)
	n.checkKVM("one", got, [][]string{cdiOf(t, got.Devices, "r0")})
	if len(got.Devices) != 1 || got.Devices[0].ShareId == nil || *got.Devices[0].ShareId != "one-share-0" {
		t.Fatalf("prepared devices %+v, want the result's shareID", got.Devices)
	}
	two := n.shareClaim("two", uid(301), 1, 1)
	got = n.prepare(kvmDriver, two)
	n.checkKVM("two", got, [][]string{cdiOf(t, got.Devices, "r0"), cdiOf(t, got.Devices, "r1")})
	// DEVICES lists a holder per share held: two holds two.
	if shares, holders := n.kvmUnit(); shares != 3 || !slices.Equal(holders, []string{string(one.UID), string(two.UID), string(two.UID)}) {
		t.Fatalf("kvm: %d shares held by %v", shares, holders)
	}
	want := []claimstate.Share{{ID: "two-share-0", Key: "kvm", Slots: 1}, {ID: "two-share-1", Key: "kvm", Slots: 1}}
	if rec := n.records(kvmDriver)[string(two.UID)]; !rec.Prepared || !slices.Equal(rec.Keys, []string{"kvm"}) || !slices.Equal(rec.Shares, want) {
		t.Fatalf("the record of two: %+v", rec)
	}

	extra := n.shareClaim("extra", uid(302), 1)
	if got := n.prepare(kvmDriver, extra); !strings.Contains(got.Error, "kvm") {
		t.Fatalf("a fourth share: %q, %+v", got.Error, got.Devices)
	}
	if _, ok := n.records(kvmDriver)[string(extra.UID)]; ok {
		t.Fatal("the failed prepare left a record")
	}

	// A replay of two's ADD (its spec files gone, as after a reboot)
	// names kvm twice again, and the plugin answers what it holds.
	for _, f := range n.specFiles() {
		if strings.Contains(f, string(two.UID)) {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	got = n.prepare(kvmDriver, two)
	n.checkKVM("two again", got, [][]string{cdiOf(t, got.Devices, "r0")})

	if r := n.unprepare(kvmDriver, two); r.Error != "" {
		t.Fatal(r.Error)
	}
	pair := n.shareClaim("pair", uid(303), 2)
	got = n.prepare(kvmDriver, pair)
	n.checkKVM("pair", got, [][]string{cdiOf(t, got.Devices, "r0")})
	if rec := n.records(kvmDriver)[string(pair.UID)]; !slices.Equal(rec.Shares, []claimstate.Share{{ID: "pair-share-0", Key: "kvm", Slots: 2}}) {
		t.Fatalf("the record of pair: %+v", rec)
	}
	for _, c := range []*resourceapi.ResourceClaim{one, pair} {
		if r := n.unprepare(kvmDriver, c); r.Error != "" {
			t.Fatal(r.Error)
		}
	}

	// A share held outside Kubernetes is not the scheduler's to give.
	if err := n.run("generic", kvmConf, "CDI_COMMAND=ADD", "CDI_VERSION=0.0.2", "CDI_REQUEST=kvm:1", "CDI_REQUEST_ID=outside"); err != nil {
		t.Fatal(err)
	}
	in.driver(kvmDriver).refresh(t.Context())
	n.eventually("kvm's capacity 2", func() error {
		devs := n.waitSlice(kvmDriver, []string{"kvm"})
		if q := devs[0].Capacity[capShares].Value; q.Value() != 2 {
			return fmt.Errorf("capacity %v", q.String())
		}
		return nil
	})
}

// checkCapacity checks a shared unit's device: many allocations, a
// capacity of shares, one share by default, up to all.
func checkCapacity(t *testing.T, d resourceapi.Device, shares int64) {
	t.Helper()
	c, ok := d.Capacity[capShares]
	if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations || !ok || c.Value.Value() != shares || c.RequestPolicy == nil {
		t.Fatalf("device %s: allowMultipleAllocations %v, capacity %+v", d.Name, d.AllowMultipleAllocations, d.Capacity)
	}
	p := c.RequestPolicy
	if p.Default == nil || p.Default.Value() != 1 || p.ValidRange == nil || p.ValidRange.Min.Value() != 1 ||
		p.ValidRange.Max == nil || p.ValidRange.Max.Value() != shares || p.ValidRange.Step == nil || p.ValidRange.Step.Value() != 1 {
		t.Fatalf("device %s: request policy %+v", d.Name, p)
	}
	if v := d.Attributes[attrKey].StringValue; v == nil || *v != "kvm" {
		t.Fatalf("device %s: attributes %v", d.Name, d.Attributes)
	}
}
