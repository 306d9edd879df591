package dra

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
	"github.com/cdi-exec/plugins/test/fixture"
)

// kvmUnlimitedConf is a generic config of /dev/kvm of unlimited shares.
const kvmUnlimitedConf = `{"cdiVersion":"0.0.2","name":"kvm","type":"kvm","plugin":"generic","args":{"rules":[{"paths":["/dev/kvm"],"shares":"unlimited"}]}}`

// setPods sets the node's allocatable pods in the fake API server.
func (n *node) setPods(pods int64) {
	n.t.Helper()
	ctx := context.Background()
	node, err := n.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	node.Status.Allocatable = corev1.ResourceList{corev1.ResourcePods: *apiresource.NewQuantity(pods, apiresource.DecimalSI)}
	if _, err := n.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// refreshPods asks the driver's plugins for their devices again, the
// node's pods read again whether or not a minute passed (every: 0) or
// only if it did (every: podsEvery), and returns what a unit of
// unlimited shares is offered as then.
func (in *instance) refreshPods(driver string, every time.Duration) int {
	d := in.driver(driver)
	d.publisher.mu.Lock()
	d.publisher.podsEvery = every
	d.publisher.mu.Unlock()
	d.refresh(in.n.t.Context())
	return d.publisher.poller.UnlimitedShares()
}

// getsOfNode counts the GETs of the node the fake API server saw.
func (n *node) getsOfNode() int {
	gets := 0
	for _, a := range n.client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" {
			gets++
		}
	}
	return gets
}

// TestUnlimitedSharesFollowPods: on an API server with consumable
// capacity, kvm of unlimited shares is one device whose capacity is the
// node's allocatable pods: the kubelet's default, 110, while the node
// says none, then what it says, read again and republished when it
// changes, but not read again within a minute. Claims of one and of two
// shares prepare, and the plugin lists a holder per share.
func TestUnlimitedSharesFollowPods(t *testing.T) {
	needNodes(t)
	n := newNode(t, fixture.GenericDevices(), map[string]string{"kvm.d/generic.conf": kvmUnlimitedConf})
	in := n.start(n.options())
	checkCapacity(t, n.waitSlice(kvmDriver, []string{"kvm"})[0], inventory.DefaultMaxPods)

	n.setPods(30)
	if got := in.refreshPods(kvmDriver, 0); got != 30 {
		t.Fatalf("with 30 allocatable pods, unlimited is %d shares", got)
	}
	n.eventually("kvm's capacity 30", func() error {
		return capacityIs(n.waitSlice(kvmDriver, []string{"kvm"})[0], 30)
	})
	checkCapacity(t, n.waitSlice(kvmDriver, []string{"kvm"})[0], 30)

	// Within a minute the node is not read again.
	n.setPods(40)
	gets := n.getsOfNode()
	if got := in.refreshPods(kvmDriver, podsEvery); got != 30 {
		t.Fatalf("read again within a minute: %d shares", got)
	}
	if n.getsOfNode() != gets {
		t.Fatal("the node was read again within a minute")
	}
	if got := in.refreshPods(kvmDriver, 0); got != 40 {
		t.Fatalf("with 40 allocatable pods, unlimited is %d shares", got)
	}
	n.eventually("kvm's capacity 40", func() error {
		return capacityIs(n.waitSlice(kvmDriver, []string{"kvm"})[0], 40)
	})

	one := n.shareClaim("one", uid(400), 0)
	got := n.prepare(kvmDriver, one)
	n.checkKVM("one", got, [][]string{cdiOf(t, got.Devices, "r0")})
	pair := n.shareClaim("pair", uid(401), 2)
	got = n.prepare(kvmDriver, pair)
	n.checkKVM("pair", got, [][]string{cdiOf(t, got.Devices, "r0")})
	if shares, holders := n.kvmUnit(); shares != 0 || !slices.Equal(holders, []string{string(one.UID), string(pair.UID), string(pair.UID)}) {
		t.Fatalf("kvm: %d shares held by %v", shares, holders)
	}
	for _, c := range []string{"one", "pair"} {
		claim := one
		if c == "pair" {
			claim = pair
		}
		if r := n.unprepare(kvmDriver, claim); r.Error != "" {
			t.Fatalf("unprepare %s: %s", c, r.Error)
		}
	}
	if _, holders := n.kvmUnit(); len(holders) != 0 {
		t.Fatalf("after unprepare kvm is held by %v", holders)
	}
}

// capacityIs says whether a shared unit's device has the capacity of
// shares.
func capacityIs(d resourceapi.Device, shares int64) error {
	if q := d.Capacity[capShares].Value; q.Value() != shares {
		return fmt.Errorf("capacity %s, want %d", q.String(), shares)
	}
	return nil
}

// TestUnlimitedSharesAsDevices: on an API server without consumable
// capacity (1.35), kvm of unlimited shares is one device per allocatable
// pod, and one more when the node's pods grow; a claim of a share device
// prepares and gets /dev/kvm.
func TestUnlimitedSharesAsDevices(t *testing.T) {
	needNodes(t)
	n := newNode(t, fixture.GenericDevices(), map[string]string{"kvm.d/generic.conf": kvmUnlimitedConf})
	noConsumableCapacity(n.client)
	n.setPods(4)
	in := n.start(n.options())
	in.refreshPods(kvmDriver, 0) // the first slice may name the default, before the driver saw it dropped
	n.waitSlice(kvmDriver, []string{"kvm", "x-kvm-0s1", "x-kvm-0s2", "x-kvm-0s3"})
	n.setPods(5)
	if got := in.refreshPods(kvmDriver, 0); got != 5 {
		t.Fatalf("with 5 allocatable pods, unlimited is %d shares", got)
	}
	n.waitSlice(kvmDriver, []string{"kvm", "x-kvm-0s1", "x-kvm-0s2", "x-kvm-0s3", "x-kvm-0s4"})
	c := n.claim("vm", uid(410), kvmDriver, "x-kvm-0s4")
	got := n.prepare(kvmDriver, c)
	if len(got.Devices) != 1 {
		t.Fatalf("prepare: %+v (%s)", got.Devices, got.Error)
	}
	n.checkKVM("x-kvm-0s4", got, [][]string{got.Devices[0].CdiDeviceIds})
}
