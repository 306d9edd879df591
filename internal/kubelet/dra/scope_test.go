package dra

import (
	"fmt"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cdi-exec/plugins/internal/kubelet/podgc"
	"github.com/cdi-exec/plugins/test/kubelettest"
)

// TestReadsScopedToNode: a node's driver reads only what is scoped to its
// node. Through its whole life here (the slices published, claims
// prepared, prepared again and unprepared, the stale-claim collector
// freeing a deleted claim, a type moved from the device-plugin mode with
// an id of that mode freed) the API server sees no LIST or WATCH of
// anything but the driver's own ResourceSlices, and those only by a field
// selector on the node.
func TestReadsScopedToNode(t *testing.T) {
	const res = "cdi-exec.io/tty"
	n := ttyNode(t)
	kl := kubelettest.Start(t)
	n.kubelet = kl.Root
	left := podgc.RequestID(res, "tty", []string{"tty17"})
	n.pinDevicePlugin(left, "tty17")
	kl.SetPods(kubelettest.Pod("default", "other", "c", "example.com/x", "a")) // not tty17's
	opt := n.options()
	opt.StaleInterval, opt.StaleGrace = 20*time.Millisecond, 100*time.Millisecond
	opt.ClaimStatus = true
	n.start(opt)

	stays := n.claim("stays", uid(1), ttyDriver, "tty14")
	gone := n.claim("gone", uid(2), ttyDriver, "tty15")
	for _, c := range []*resourceapi.ResourceClaim{stays, gone, stays} {
		if r := n.prepare(ttyDriver, c); r.Error != "" {
			t.Fatalf("prepare %s: %s", c.Name, r.Error)
		}
	}
	if r := n.unprepare(ttyDriver, stays); r.Error != "" {
		t.Fatal(r.Error)
	}
	n.deleteClaim(gone)
	n.eventually("the collectors to free the deleted claim and the device-plugin id", func() error {
		h := n.holders("tty")
		if h["tty15"] != "" || h["tty17"] != "" {
			return fmt.Errorf("holders %v", h)
		}
		return nil
	})
	// (The test itself lists nothing: the fake API server records every
	// caller's actions.)
	lists := 0
	for _, a := range n.client.Actions() {
		verb, res := a.GetVerb(), a.GetResource().Resource
		if verb != "list" && verb != "watch" {
			continue
		}
		lists++
		if res != "resourceslices" {
			t.Errorf("%s of %s: a node's driver lists or watches only its own ResourceSlices", verb, res)
			continue
		}
		var sel string
		switch a := a.(type) {
		case k8stesting.ListActionImpl:
			sel = a.GetListRestrictions().Fields.String()
		case k8stesting.WatchActionImpl:
			sel = a.GetWatchRestrictions().Fields.String()
		}
		if !strings.Contains(sel, "spec.nodeName="+nodeName) {
			t.Errorf("%s of resourceslices with field selector %q: not scoped to the node", verb, sel)
		}
	}
	if lists == 0 {
		t.Error("no list of the driver's own ResourceSlices: the check saw nothing")
	}
}
