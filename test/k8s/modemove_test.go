//go:build e2enode

package k8se2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestClusterModeMove moves the tty type from the device-plugin mode to
// the DRA mode with helm upgrade, without a drain (docs/kubernetes.md,
// "Moving a type between modes"):
//  1. helm install in the device-plugin mode; three pods get a tty each
//     through resources.limits;
//  2. helm upgrade --set mode=dra: the three keep running in the same
//     containers, and the DRA slice leaves their ttys out;
//  3. a claim pod gets a free tty, never one of theirs;
//  4. deleting the three frees their ttys into the slice within the DRA
//     collector's period (--stale-interval and --stale-grace, shortened
//     here).
func TestClusterModeMove(t *testing.T) {
	ctx, d := newDRARun(t, 15*time.Minute, "helm")
	h := newHelmRun(t, d)
	f := &features{draRun: d}
	d.loadImage(ctx, t)
	t.Logf("helm install (device-plugin):\n%s", h.helm(ctx, t, h.values("install", "--create-namespace", "--set", "mode=device-plugin")...))
	err := waitFor(ctx, "the node to offer cdi-exec.io/tty", func(ctx context.Context) error {
		var n corev1.Node
		if err := d.c.Get(ctx, "/api/v1/nodes/"+NodeName, &n); err != nil {
			return err
		}
		if q := n.Status.Allocatable["cdi-exec.io/tty"]; q.Value() < 4 {
			return fmt.Errorf("allocatable cdi-exec.io/tty %v", q.String())
		}
		return nil
	}, d.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	names := []string{"dp-1", "dp-2", "dp-3"}
	for _, name := range names {
		doc += pod("default", name, nil, map[string]string{"c": "limits: {cdi-exec.io/tty: 1}"})
	}
	f.yaml(ctx, t, doc)
	var theirs []string
	before := map[string]Pod{}
	for _, name := range names {
		got := f.ctrTTYs(ctx, t, "default", name, "c")
		if len(got) != 1 || slices.Contains(theirs, got[0]) {
			t.Fatalf("%s sees %v (the others %v)", name, got, theirs)
		}
		theirs = append(theirs, got[0])
		p, err := d.c.WaitPod(ctx, "default", name, Running)
		if err != nil {
			t.Fatal(err)
		}
		before[name] = p
	}
	t.Logf("through the device plugin: %v", theirs)

	start := time.Now()
	t.Logf("helm upgrade --set mode=dra:\n%s", h.helm(ctx, t, h.values("upgrade", "--set", "mode=dra",
		"--set", "extraArgs={--stale-interval=5s,--stale-grace=10s}")...))
	driverPod := d.waitDriver(ctx, t, "")
	free := d.freeTTYs()
	var others []string
	for _, n := range free {
		if !slices.Contains(theirs, n) {
			others = append(others, n)
		}
	}
	d.waitSliceOf(ctx, t, others)
	t.Logf("driver pod %s serves %.1fs after helm upgrade; the slice leaves out %v", driverPod, time.Since(start).Seconds(), theirs)
	for _, name := range names {
		after, err := d.c.WaitPod(ctx, "default", name, Running)
		if err != nil {
			t.Fatal(err)
		}
		sameContainer(t, "the move to DRA", before[name], after)
	}

	f.yaml(ctx, t, claimYAML("default", "after-move", `
requests:
- name: r
  exactly: {deviceClassName: tty.cdi-exec.io, count: 1}`)+
		pod("default", "claim-pod", []string{"name: t\n    resourceClaimName: after-move"}, map[string]string{"c": "claims: [{name: t}]"}))
	got := f.ctrTTYs(ctx, t, "default", "claim-pod", "c")
	if len(got) != 1 || slices.Contains(theirs, got[0]) {
		t.Fatalf("the claim pod sees %v; the device-plugin pods hold %v", got, theirs)
	}
	t.Logf("the claim pod got %v", got)

	start = time.Now()
	for _, name := range names {
		if _, err := d.c.Kubectl(ctx, "delete", "pod", name, "--grace-period=0", "--wait=false"); err != nil {
			t.Fatal(err)
		}
	}
	// A claim's devices stay in the slice (the scheduler counts them):
	// the slice lists every free tty again.
	d.waitSliceOf(ctx, t, free)
	took := time.Since(start)
	t.Logf("the device-plugin pods' ttys %v are back in the slice %.1fs after their deletion", theirs, took.Seconds())
	if took > 90*time.Second {
		t.Fatalf("freed %.1fs after the deletion; the collector's period is 5s + 10s", took.Seconds())
	}
	d.waitLog(ctx, t, driverPod, "freed a device-plugin id")
}
