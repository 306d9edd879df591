package dra

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/cdi-exec/plugins/test/kubelettest"
)

// addCounter counts the plugins' ADD runs.
type addCounter struct{ n atomic.Int64 }

func (c *addCounter) ObservePluginRun(_, command string, _ int, _ time.Duration) {
	if command == "ADD" {
		c.n.Add(1)
	}
}

// aheadNode is a tty node whose plugin prepares ahead, with its ADDs
// counted.
func aheadNode(t *testing.T) (*node, *instance, *addCounter) {
	n := ttyNode(t)
	opt := n.options()
	opt.PrepareAhead = true
	opt.ClaimStatus = true
	adds := &addCounter{}
	opt.Caller.Observer = adds
	in := n.start(opt)
	n.waitClaimWatch(in.driver(ttyDriver))
	return n, in, adds
}

// waitClaimWatch waits until the driver's claim informer watches: the
// fake API server's watch starts from now, not from its list's
// resourceVersion as the API server's does, so a change made between the
// two would be lost. A sentinel claim, allocated nothing, is changed until
// the informer shows a change.
func (n *node) waitClaimWatch(d *driver) {
	n.t.Helper()
	ctx := context.Background()
	claims := n.client.ResourceV1().ResourceClaims("default")
	c, err := claims.Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sentinel", UID: "sentinel-uid"}}, metav1.CreateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	for i := 0; ; i++ {
		c.Annotations = map[string]string{"seen": fmt.Sprint(i)}
		if c, err = claims.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			n.t.Fatal(err)
		}
		d.mu.Lock()
		store := d.claims
		d.mu.Unlock()
		if store != nil {
			if obj, ok, _ := store.GetByKey("default/sentinel"); ok && len(obj.(*resourceapi.ResourceClaim).Annotations) > 0 {
				return
			}
		}
		if i == 6000 {
			n.t.Fatal("the claim informer shows no change of a claim after a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reserve reserves an allocated claim for a pod, as the scheduler does
// before it binds the pod, and returns the claim as the API server has it.
func (n *node) reserve(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	n.t.Helper()
	c = c.DeepCopy()
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod-" + c.Name, UID: types.UID("pod-" + c.UID)}}
	return n.updateStatus(c)
}

// updateStatus writes a claim's status.
func (n *node) updateStatus(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	n.t.Helper()
	c, err := n.client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(context.Background(), c, metav1.UpdateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return c
}

// waitHolder waits until the tty plugin's DEVICES says who holds key, ""
// for free, and the claim's record is there when the claim holds it and
// gone when it is free.
func (n *node) waitHolder(c *resourceapi.ResourceClaim, key, want string) {
	n.t.Helper()
	n.eventually(fmt.Sprintf("%s held by %q", key, want), func() error {
		if got := n.holders("tty")[key]; got != want {
			return fmt.Errorf("held by %q", got)
		}
		rec, ok := n.records(ttyDriver)[string(c.UID)]
		if ok != (want != "") || (ok && !rec.Prepared) {
			return fmt.Errorf("record %+v", rec)
		}
		return nil
	})
}

// indexerOf is an informer's store holding claims.
func indexerOf(t *testing.T, claims ...*resourceapi.ResourceClaim) cache.Indexer {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, c := range claims {
		if err := idx.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

// A claim reserved for a pod is prepared as soon as the informer shows
// it, and the kubelet's prepare answers the same, without a second ADD.
// Once the kubelet has unprepared it, it is not prepared ahead again,
// although its allocation stays until its pod is gone.
func TestPrepareAhead(t *testing.T) {
	n, in, adds := aheadNode(t)
	c := n.claim("c0", uid(1), ttyDriver, "tty13")
	key := c.Namespace + "/" + c.Name
	d := in.driver(ttyDriver)
	d.syncAhead(context.Background(), indexerOf(t, c), key)
	if got := n.holders("tty")["tty13"]; got != "" || adds.n.Load() != 0 {
		t.Fatalf("a claim reserved for no pod was prepared ahead: tty13 held by %q, %d ADDs", got, adds.n.Load())
	}

	c = n.reserve(c)
	n.waitHolder(c, "tty13", string(c.UID))
	if got := adds.n.Load(); got != 1 {
		t.Fatalf("%d ADDs prepared the claim ahead, want 1", got)
	}
	n.eventually("the device status written ahead", func() error {
		if got := n.claimDevices(c); len(got) != 1 || got[0].Device != "tty13" || got[0].Conditions[0].Type != ConditionReady {
			return fmt.Errorf("status.devices %+v", got)
		}
		return nil
	})
	n.checkPrepared(c, n.prepare(ttyDriver, c), "tty13")
	if got := adds.n.Load(); got != 1 {
		t.Fatalf("%d ADDs after the kubelet's prepare, want the 1 ahead", got)
	}
	reg := in.plugin.opt.Metrics.Registry()
	for event, want := range map[string]float64{"prepared": 1, "used": 1, "failed": 0, "freed": 0} {
		if got := kubelettest.Metric(t, reg, "cdi_exec_prepare_ahead_total", "driver", ttyDriver, "event", event); got != want {
			t.Errorf("cdi_exec_prepare_ahead_total{event=%q} %v, want %v", event, got, want)
		}
	}
	if resp := n.unprepare(ttyDriver, c); resp.Error != "" {
		t.Fatalf("unprepare: %s", resp.Error)
	}
	n.waitHolder(c, "tty13", "")

	// Still allocated and reserved (the pod is ending): a change of the
	// claim does not prepare it again.
	c, err := n.client.ResourceV1().ResourceClaims(c.Namespace).Get(context.Background(), c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Annotations = map[string]string{"touched": "1"}
	c = n.updateStatus(c)
	d.syncAhead(context.Background(), indexerOf(t, c), key)
	if got := n.holders("tty")["tty13"]; got != "" || adds.n.Load() != 1 {
		t.Fatalf("an unprepared claim was prepared ahead again: tty13 held by %q, %d ADDs", got, adds.n.Load())
	}
	n.deleteClaim(c)
	n.eventually("the deleted claim forgotten", func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if len(d.unprepared) != 0 || len(d.ahead) != 0 {
			return fmt.Errorf("unprepared %v, ahead %v", d.unprepared, d.ahead)
		}
		return nil
	})
}

// A claim prepared ahead whose allocation goes, or which is deleted,
// before the kubelet asks for it is freed at once: the scheduler may give
// its devices to another claim. One allocated another device meanwhile
// (deallocated and allocated again before a worker saw it in between) is
// prepared anew, for that device.
func TestPrepareAheadFreesUnasked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		undo  func(n *node, c *resourceapi.ResourceClaim)
		again string // the device the claim is prepared ahead for again
	}{
		{name: "deallocated", undo: func(n *node, c *resourceapi.ResourceClaim) {
			c = c.DeepCopy()
			c.Status = resourceapi.ResourceClaimStatus{}
			n.updateStatus(c)
		}},
		{name: "deleted", undo: func(n *node, c *resourceapi.ResourceClaim) { n.deleteClaim(c) }},
		{name: "allocated elsewhere", undo: func(n *node, c *resourceapi.ResourceClaim) {
			c = c.DeepCopy()
			c.Status.Allocation.Devices.Results[0].Pool = "node-2"
			n.updateStatus(c)
		}},
		{name: "allocated another device", again: "tty15", undo: func(n *node, c *resourceapi.ResourceClaim) {
			c = c.DeepCopy()
			c.Status.Allocation.Devices.Results[0].Device = "tty15"
			n.updateStatus(c)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, in, adds := aheadNode(t)
			c := n.reserve(n.claim("c0", uid(1), ttyDriver, "tty14"))
			n.waitHolder(c, "tty14", string(c.UID))
			tc.undo(n, c)
			d := in.driver(ttyDriver)
			wantAdds, wantAhead := int64(1), 0
			if tc.again != "" {
				n.waitHolder(c, tc.again, string(c.UID))
				wantAdds, wantAhead = 2, 1
			}
			n.eventually("tty14 freed, and held ahead what should be", func() error {
				if got := n.holders("tty")["tty14"]; got != "" {
					return fmt.Errorf("tty14 held by %q", got)
				}
				d.mu.Lock()
				defer d.mu.Unlock()
				if len(d.ahead) != wantAhead {
					return fmt.Errorf("held ahead: %v", d.ahead)
				}
				return nil
			})
			if tc.again == "" {
				n.waitHolder(c, "tty14", "")
			}
			if got := adds.n.Load(); got != wantAdds {
				t.Fatalf("%d ADDs, want %d", got, wantAdds)
			}
			if got := kubelettest.Metric(t, in.plugin.opt.Metrics.Registry(), "cdi_exec_prepare_ahead_total", "driver", ttyDriver, "event", "freed"); got != 1 {
				t.Errorf("cdi_exec_prepare_ahead_total{event=\"freed\"} %v, want 1", got)
			}
		})
	}
}

// Claims the kubelet asks for while they are being prepared ahead are
// each prepared once, with one ADD, whichever comes first; all are freed
// by the kubelet's unprepares, and nothing stays prepared ahead.
func TestPrepareAheadBesideTheKubelet(t *testing.T) {
	n, in, adds := aheadNode(t)
	keys := ttys(13, 18)
	claims := make([]*resourceapi.ResourceClaim, len(keys))
	for i, k := range keys {
		claims[i] = n.reserve(n.claim(fmt.Sprint("c", i), uid(100+i), ttyDriver, k))
	}
	answers := in.prepareAtOnce(ttyDriver, claims)
	for i, c := range claims {
		n.checkPrepared(c, answers[i], keys[i])
	}
	for _, c := range claims {
		if resp := n.unprepare(ttyDriver, c); resp.Error != "" {
			t.Fatalf("unprepare of %s: %s", c.Name, resp.Error)
		}
	}
	// A prepare ahead that comes after the kubelet's unprepare leaves the
	// claim as it is.
	d := in.driver(ttyDriver)
	for _, c := range claims {
		d.syncAhead(context.Background(), indexerOf(t, c), c.Namespace+"/"+c.Name)
	}
	for k, h := range n.holders("tty") {
		if h != "" {
			t.Errorf("%s still held by %s", k, h)
		}
	}
	if r := n.records(ttyDriver); len(r) != 0 {
		t.Errorf("records left: %v", r)
	}
	if got := adds.n.Load(); got != int64(len(claims)) {
		t.Errorf("%d ADDs for %d claims, want one each", got, len(claims))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.ahead) != 0 {
		t.Errorf("claims left prepared ahead: %v", d.ahead)
	}
}

// A claim prepared ahead stays prepared while it is being deleted or is
// no longer reserved (its pod may still run; the kubelet unprepares it),
// and one prepared ahead longer than aheadKeep ago is left to the
// stale-claim collector when its allocation goes.
func TestPrepareAheadKeeps(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name   string
		change func(d *driver, c *resourceapi.ResourceClaim)
	}{
		{"being deleted", func(_ *driver, c *resourceapi.ResourceClaim) { c.DeletionTimestamp = &now }},
		{"no longer reserved", func(_ *driver, c *resourceapi.ResourceClaim) { c.Status.ReservedFor = nil }},
		{"deallocated past aheadKeep", func(d *driver, c *resourceapi.ResourceClaim) {
			d.mu.Lock()
			a := d.ahead[string(c.UID)]
			a.since = a.since.Add(-aheadKeep - time.Second)
			d.ahead[string(c.UID)] = a
			d.mu.Unlock()
			c.Status = resourceapi.ResourceClaimStatus{}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, in, _ := aheadNode(t)
			c := n.reserve(n.claim("c0", uid(1), ttyDriver, "tty14"))
			n.waitHolder(c, "tty14", string(c.UID))
			d := in.driver(ttyDriver)
			c = c.DeepCopy()
			tc.change(d, c)
			d.syncAhead(context.Background(), indexerOf(t, c), c.Namespace+"/"+c.Name)
			if got := n.holders("tty")["tty14"]; got != string(c.UID) {
				t.Fatalf("tty14 held by %q, want the claim still", got)
			}
			if rec := n.records(ttyDriver)[string(c.UID)]; !rec.Prepared {
				t.Fatalf("record %+v, want it prepared", rec)
			}
		})
	}
}

// A prepare ahead that fails (the device is another caller's) holds
// nothing and records nothing; the kubelet's prepare reports the failure.
func TestPrepareAheadFails(t *testing.T) {
	n, in, _ := aheadNode(t)
	if err := n.run("generic-tty", ttyConf, "CDI_COMMAND=ADD", "CDI_VERSION=0.0.2", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=other",
		"CDI_REQUEST_DEVICES=tty16"); err != nil {
		t.Fatal(err)
	}
	c := n.reserve(n.claim("c0", uid(1), ttyDriver, "tty16"))
	reg := in.plugin.opt.Metrics.Registry()
	n.eventually("the prepare ahead to fail", func() error {
		if got := kubelettest.Metric(t, reg, "cdi_exec_prepare_ahead_total", "driver", ttyDriver, "event", "failed"); got != 1 {
			return fmt.Errorf("%v failed", got)
		}
		return nil
	})
	if got := n.holders("tty")["tty16"]; got != "other" {
		t.Fatalf("tty16 held by %q, want the other caller", got)
	}
	if r := n.records(ttyDriver); len(r) != 0 {
		t.Fatalf("records left: %v", r)
	}
	if resp := n.prepare(ttyDriver, c); resp.Error == "" {
		t.Fatal("the kubelet's prepare of a device held by another caller succeeded")
	}
}

// BenchmarkClaimInformerMemory reports what the prepare-ahead informer's
// store holds per ResourceClaim of the cluster (heap bytes after a GC),
// for claims the shape the resourceclaim controller makes from a
// template, allocated one device and reserved for their pod:
//
//	go test -run '^$' -bench ClaimInformerMemory -benchtime 1x ./internal/kubelet/dra
func BenchmarkClaimInformerMemory(b *testing.B) {
	const claims = 5000
	client := fakeAPI()
	for i := range claims {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: fmt.Sprintf("pod-%05d-gpu-x7k2q", i), UID: types.UID(uid(i)),
			Annotations: map[string]string{"resource.kubernetes.io/pod-claim-name": "gpu"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: fmt.Sprintf("pod-%05d", i),
				UID: types.UID(uid(claims + i))}},
			Finalizers: []string{"resource.kubernetes.io/delete-protection"},
		}}
		c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: gpuDriver, Count: 1}}}
		c.Status.Allocation = &resourceapi.AllocationResult{}
		c.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: gpuDriver, Pool: nodeName, Device: "pci-0000-10-00-0"}}
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: fmt.Sprintf("pod-%05d", i), UID: types.UID(uid(claims + i))}}
		if _, err := client.ResourceV1().ResourceClaims("default").Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ctx, cancel := context.WithCancel(context.Background())
		inf := claimInformer(client)
		go inf.RunWithContext(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) || len(inf.GetStore().List()) != claims {
			b.Fatal("the informer did not sync")
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/claims, "bytes/claim")
		cancel()
	}
}

// A claim recorded for other devices than it is allocated now, prepared
// ahead by another process (the other pod of a rolling update, or before
// a restart), was deallocated since: its old devices are freed and the
// new ones prepared, so that the kubelet's prepare finds them.
func TestPrepareAheadAllocatedAnew(t *testing.T) {
	n, in, _ := aheadNode(t)
	c := n.reserve(n.claim("c0", uid(1), ttyDriver, "tty14"))
	n.waitHolder(c, "tty14", string(c.UID))
	d := in.driver(ttyDriver)
	d.mu.Lock()
	clear(d.ahead) // as another process would have it
	d.mu.Unlock()
	c, err := n.client.ResourceV1().ResourceClaims(c.Namespace).Get(context.Background(), c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Allocation.Devices.Results[0].Device = "tty15"
	c = n.updateStatus(c)
	n.waitHolder(c, "tty15", string(c.UID))
	if got := n.holders("tty")["tty14"]; got != "" {
		t.Fatalf("tty14 held by %q, want the claim's old device freed", got)
	}
	if rec := n.records(ttyDriver)[string(c.UID)]; !rec.Prepared || !slices.Equal(rec.Keys, []string{"tty15"}) {
		t.Fatalf("record %+v", rec)
	}
}
