//go:build e2enode

package k8se2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// claimKind is what each pod of a scheduling scenario claims.
type claimKind struct {
	name   string
	class  string
	count  int64
	pcie   bool // the devices must share resource.kubernetes.io/pcieRoot
	target bool // ours / floor has the target targetSchedRatio
}

// The scheduling scenarios: each of ours against its floor, claims of
// as many devices without attributes (the floor's devices have none to
// match).
var schedPairs = []struct{ ours, floor claimKind }{
	{claimKind{"one GPU", gpuDriver, 1, false, true}, claimKind{"one device", floorDriver, 1, false, true}},
	{claimKind{"two GPUs, one pcieRoot", gpuDriver, 2, true, true}, claimKind{"two devices", floorDriver, 2, false, true}},
	{claimKind{"one kvm share", "kvm.cdi-exec.io", 1, false, false}, claimKind{"one device", floorDriver, 1, false, false}},
}

// schedResult is the throughput of one kind over the rounds: the pods
// bound and the time from the first scheduling gate removed to the last
// pod bound, summed.
type schedResult struct {
	pods int
	took time.Duration
}

func (r schedResult) rate() float64 { return float64(r.pods) / r.took.Seconds() }

// schedPair is one scenario's results, ours and the floor's.
type schedPair struct {
	ours, floor         claimKind
	oursRes, floorRes   schedResult
	checked, crossRoots int // our pods' claims checked, pairs crossing roots
}

// scheduling runs every scenario cfg.rounds times, ours and the floor's
// taking turns to go first, after a few pods of each kind, unmeasured,
// have warmed the scheduler up.
func (s *scale) scheduling(ctx context.Context, t *testing.T) []schedPair {
	t.Helper()
	for i, p := range schedPairs {
		s.schedule(ctx, t, p.ours, fmt.Sprintf("warm%d-ours", i), min(s.cfg.pods, 16))
		s.schedule(ctx, t, p.floor, fmt.Sprintf("warm%d-floor", i), min(s.cfg.pods, 16))
	}
	var out []schedPair
	n := 0
	for _, p := range schedPairs {
		sp := schedPair{ours: p.ours, floor: p.floor}
		for round := range s.cfg.rounds {
			kinds := []claimKind{p.ours, p.floor}
			if round%2 == 1 {
				kinds = []claimKind{p.floor, p.ours}
			}
			for _, k := range kinds {
				n++
				took, checked, cross := s.schedule(ctx, t, k, fmt.Sprintf("s%d", n), s.cfg.pods)
				if k == p.ours {
					sp.oursRes.pods += s.cfg.pods
					sp.oursRes.took += took
					sp.checked += checked
					sp.crossRoots += cross
				} else {
					sp.floorRes.pods += s.cfg.pods
					sp.floorRes.took += took
				}
				t.Logf("%s: %d pods bound in %s (%.1f a second)", k.name, s.cfg.pods, took.Round(time.Millisecond), float64(s.cfg.pods)/took.Seconds())
			}
		}
		out = append(out, sp)
	}
	return out
}

// schedule creates pods claims of kind k and a pod for each, held
// back by a scheduling gate, then removes the gates, 16 at a time, and
// times until every pod is bound. It checks the allocations (every
// device once, on the pod's node; a pcie pair on one root), deletes the
// pods and claims, and waits until the claims are gone.
func (s *scale) schedule(ctx context.Context, t *testing.T, k claimKind, id string, pods int) (took time.Duration, checked, cross int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cs := s.client
	labels := map[string]string{benchLabel: id}
	err := parallel(pods, 16, func(i int) error {
		name := fmt.Sprintf("%s-%d", id, i)
		req := resourceapi.DeviceRequest{Name: "d", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: k.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: k.count}}
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: scaleNS, Labels: labels},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}}}
		if k.pcie {
			root := resourceapi.FullyQualifiedName(pcieRootKey)
			claim.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"d"}, MatchAttribute: &root}}
		}
		if _, err := cs.ResourceV1().ResourceClaims(scaleNS).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			return err
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: scaleNS, Labels: labels},
			Spec: corev1.PodSpec{
				SchedulingGates:               []corev1.PodSchedulingGate{{Name: gateName}},
				TerminationGracePeriodSeconds: new(int64),
				ResourceClaims:                []corev1.PodResourceClaim{{Name: "d", ResourceClaimName: &name}},
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "d"}}}}},
			}}
		_, err := cs.CoreV1().Pods(scaleNS).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sel := benchLabel + "=" + id
	list, err := cs.CoreV1().Pods(scaleNS).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().Pods(scaleNS).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	nodeOf := map[string]string{}
	var mu sync.Mutex
	lastBound := make(chan time.Time, 1)
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || pod.Spec.NodeName == "" {
				continue
			}
			mu.Lock()
			if _, seen := nodeOf[pod.Name]; !seen {
				nodeOf[pod.Name] = pod.Spec.NodeName
				if len(nodeOf) == pods {
					lastBound <- time.Now()
				}
			}
			mu.Unlock()
		}
	}()
	start := time.Now()
	ungate := []byte(`[{"op": "remove", "path": "/spec/schedulingGates"}]`)
	err = parallel(pods, 16, func(i int) error {
		_, err := cs.CoreV1().Pods(scaleNS).Patch(ctx, fmt.Sprintf("%s-%d", id, i), types.JSONPatchType, ungate, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-lastBound:
		took = at.Sub(start)
	case <-ctx.Done():
		mu.Lock()
		bound := len(nodeOf)
		mu.Unlock()
		t.Fatalf("%s: %d of %d pods bound: %v", k.name, bound, pods, ctx.Err())
	}
	mu.Lock()
	nodes := maps.Clone(nodeOf)
	mu.Unlock()
	if k.class != floorDriver {
		checked, cross = s.checkAllocations(ctx, t, k, sel, nodes)
	}
	s.removeScenario(ctx, t, sel)
	return took, checked, cross
}

// checkAllocations checks each claim of the scenario: allocated its
// count of devices of the pod's node, no device twice among them all,
// and with pcie both devices on one root. It returns the claims checked
// and the pairs that cross roots (an error too).
func (s *scale) checkAllocations(ctx context.Context, t *testing.T, k claimKind, sel string, nodeOf map[string]string) (checked, cross int) {
	t.Helper()
	var claims *resourceapi.ResourceClaimList
	// The scheduler binds the pod after it writes the claim's
	// allocation, so this read shows it; wait anyway, bounded.
	err := waitFor(ctx, "the scenario's claims to be allocated", func(ctx context.Context) error {
		var err error
		if claims, err = s.client.ResourceV1().ResourceClaims(scaleNS).List(ctx, metav1.ListOptions{LabelSelector: sel}); err != nil {
			return err
		}
		for _, c := range claims.Items {
			if c.Status.Allocation == nil {
				return fmt.Errorf("claim %s is not allocated", c.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	owner, shares := map[string]string{}, map[string]int{}
	for _, c := range claims.Items {
		checked++
		res := c.Status.Allocation.Devices.Results
		if int64(len(res)) != k.count {
			t.Errorf("%s: claim %s got %d devices, want %d", k.name, c.Name, len(res), k.count)
		}
		roots := map[string]bool{}
		for _, r := range res {
			key := r.Pool + "/" + r.Device
			// A device of several allocations (consumable capacity: the
			// kvm unit from 1.36) is allocated once per share, each with
			// its own shareID, and never more shares than it has.
			owned := key
			if r.ShareID != nil {
				owned += "#" + string(*r.ShareID)
				if shares[key]++; shares[key] > kvmScaleShares {
					t.Errorf("%s: device %s of %s is allocated %d shares, more than its %d", k.name, r.Device, r.Pool, shares[key], kvmScaleShares)
				}
			}
			if other, ok := owner[owned]; ok {
				t.Errorf("%s: device %s of %s is allocated to claims %s and %s", k.name, r.Device, r.Pool, other, c.Name)
			}
			owner[owned] = c.Name
			if r.Pool != nodeOf[c.Name] {
				t.Errorf("%s: claim %s got device %s of pool %s, its pod is on %s", k.name, c.Name, r.Device, r.Pool, nodeOf[c.Name])
			}
			if k.pcie {
				root, ok := s.poolAttrs[key]
				if !ok {
					t.Errorf("%s: device %s has no %s attribute", k.name, key, pcieRootKey)
				}
				roots[root] = true
			}
		}
		if k.pcie && len(roots) > 1 {
			cross++
			t.Errorf("%s: claim %s's devices are on %d roots: %v", k.name, c.Name, len(roots), roots)
		}
	}
	if checked != len(nodeOf) {
		t.Errorf("%s: %d claims for %d pods", k.name, checked, len(nodeOf))
	}
	return checked, cross
}

// removeScenario deletes the scenario's pods at once (no kubelet would
// confirm a graceful deletion) and its claims, and waits until the
// claims are gone: the controller-manager frees them first.
func (s *scale) removeScenario(ctx context.Context, t *testing.T, sel string) {
	t.Helper()
	cs := s.client
	now := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	if err := cs.CoreV1().Pods(scaleNS).DeleteCollection(ctx, now, metav1.ListOptions{LabelSelector: sel}); err != nil {
		t.Fatal(err)
	}
	if err := cs.ResourceV1().ResourceClaims(scaleNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err := waitFor(ctx, "the scenario's claims to be gone", func(ctx context.Context) error {
		l, err := cs.ResourceV1().ResourceClaims(scaleNS).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		if len(l.Items) > 0 {
			var left []string
			for _, c := range l.Items[:min(3, len(l.Items))] {
				left = append(left, fmt.Sprintf("%s (finalizers %v, reserved for %d)", c.Name, c.Finalizers, len(c.Status.ReservedFor)))
			}
			return fmt.Errorf("%d claims left: %s", len(l.Items), strings.Join(left, ", "))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
