package dra

import (
	"context"
	"fmt"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// Claims prepared and unprepared at once (a batch of pods; the helper
// does not serialise) each get their own device, spec and record, and a
// claim prepared twice at once is prepared once.
func TestPreparesAtOnce(t *testing.T) {
	n := ttyNode(t)
	in := n.start(n.options())
	keys := ttys(13, 18)
	claims := make([]*resourceapi.ResourceClaim, len(keys))
	for i, k := range keys {
		claims[i] = n.claim(fmt.Sprint("c", i), uid(100+i), ttyDriver, k)
	}
	// Each claim once, and the first one a second time beside itself.
	calls := append(append([]*resourceapi.ResourceClaim{}, claims...), claims[0])
	answers := in.prepareAtOnce(ttyDriver, calls)
	for i, c := range calls {
		n.checkPrepared(c, answers[i], c.Status.Allocation.Devices.Results[0].Device)
	}
	if r := n.records(ttyDriver); len(r) != len(claims) {
		t.Fatalf("%d claim records, want %d: %v", len(r), len(claims), r)
	}

	errs := make([]error, len(claims))
	var wg sync.WaitGroup
	unprepared := make([]*drapb.NodeUnprepareResourceResponse, len(claims))
	for i, c := range claims {
		wg.Go(func() {
			resp, err := in.dra(ttyDriver).NodeUnprepareResources(context.Background(), &drapb.NodeUnprepareResourcesRequest{
				Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}},
			})
			if err == nil {
				unprepared[i] = resp.Claims[string(c.UID)]
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, c := range claims {
		if errs[i] != nil || unprepared[i].Error != "" {
			t.Fatalf("unprepare of %s: %v %v", c.Name, errs[i], unprepared[i])
		}
	}
	if held := n.holders("tty"); len(held) == 0 {
		t.Fatal("no devices listed")
	} else {
		for k, h := range held {
			if h != "" {
				t.Errorf("%s still held by %s", k, h)
			}
		}
	}
	if f := n.specFiles(); len(f) != 0 {
		t.Errorf("spec files left: %v", f)
	}
	if r := n.records(ttyDriver); len(r) != 0 {
		t.Errorf("records left: %v", r)
	}
}

// prepareAtOnce calls the driver's NodePrepareResources for every claim
// at once, one call per claim, as the kubelet does for pods starting
// together, and returns the answers in the claims' order.
func (in *instance) prepareAtOnce(driver string, claims []*resourceapi.ResourceClaim) []*drapb.NodePrepareResourceResponse {
	t := in.n.t
	t.Helper()
	answers := make([]*drapb.NodePrepareResourceResponse, len(claims))
	errs := make([]error, len(claims))
	var wg sync.WaitGroup
	for i, c := range claims {
		wg.Go(func() {
			resp, err := in.dra(driver).NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{
				Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}},
			})
			if err == nil {
				answers[i] = resp.Claims[string(c.UID)]
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, c := range claims {
		if errs[i] != nil {
			t.Fatalf("NodePrepareResources of %s: %v", c.Name, errs[i])
		}
	}
	return answers
}
