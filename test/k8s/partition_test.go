//go:build e2enode

package k8se2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cdi-exec/plugins/test/fixture"
)

// TestClusterDRAPartitionable: on the simulated kernel, two SR-IOV PFs
// with no VFs yet and a config of 4 VFs each are published as 8 VFs that
// consume their PF's counters. Ten pods with a one-VF claim each: eight
// run, each with its own VF's render node, and two stay Pending; deleting
// a running one lets a pending one run. The prepares create the VFs.
func TestClusterDRAPartitionable(t *testing.T) {
	var h fixture.Host
	for i, pf := range []string{"0000:03:00.0", "0000:04:00.0"} {
		h.GPUs = append(h.GPUs, fixture.GPU{Addr: pf, Vendor: "0x8086", Device: "0x56c0", NUMA: fixture.Int(0),
			Driver: "i915", Card: i, Render: 128 + i, Control: -1, TotalVFs: 8, IOMMUGroup: fixture.Int(3 + i)})
	}
	var vfs []string
	for _, pf := range []string{"03", "04"} {
		for k := 1; k <= 4; k++ {
			vfs = append(vfs, fmt.Sprintf("pci-0000-%s-00-%d", pf, k))
		}
	}
	ctx, f := newFixtureRun(t, 30*time.Minute, h, true, map[string]string{
		"vgpu": `{"cdiVersion": "0.0.2", "name": "vGPUs", "type": "vgpu", "plugin": "sriov", "args": {"pf_pci_addresses": ["0000:03:00.0", "0000:04:00.0"], "num_vfs": 4, "delegate": {"plugin": "drm", "args": {"want_device_nodes": ["render"]}}}}`,
	}, map[string][]string{"vgpu": vfs})

	doc := `---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-vf, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: r
        exactly: {deviceClassName: vgpu.cdi-exec.io, count: 1}
`
	var names []string
	for i := range 10 {
		name := fmt.Sprintf("vf-%d", i)
		names = append(names, name)
		doc += pod("default", name, []string{"name: vf\n    resourceClaimTemplateName: one-vf"}, map[string]string{"c": "claims: [{name: vf}]"})
	}
	f.yaml(ctx, t, doc)
	running, pending := f.phases(ctx, t, names, 8, 2)
	t.Logf("ten one-VF pods on two PFs of 4 VFs: running %v, pending %v", running, pending)

	if _, err := f.c.Kubectl(ctx, "delete", "pod", running[0], "--grace-period=0", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return n == running[0] })
	again, still := f.phases(ctx, t, names, 8, 1)
	t.Logf("after deleting %s: running %v, pending %v", running[0], again, still)
	for _, pf := range []string{"0000:03:00.0", "0000:04:00.0"} {
		if got := f.numVFs(t, pf); got != "4" {
			t.Fatalf("%s has %s VFs, want the 4 its prepares made", pf, got)
		}
	}
}

// phases waits until exactly wantRunning of the pods run and the others
// (wantPending) are Pending, unschedulable, and returns their names.
func (f *fixtureRun) phases(ctx context.Context, t *testing.T, names []string, wantRunning, wantPending int) (running, pending []string) {
	t.Helper()
	err := waitFor(ctx, fmt.Sprintf("%d pods running and %d pending", wantRunning, wantPending), func(ctx context.Context) error {
		running, pending = nil, nil
		for _, name := range names {
			var p corev1.Pod
			if err := f.c.Get(ctx, "/api/v1/namespaces/default/pods/"+name, &p); err != nil {
				return err
			}
			switch {
			case p.Status.Phase == corev1.PodRunning:
				running = append(running, name)
			case p.Status.Phase == corev1.PodPending && p.Spec.NodeName == "" && unschedulable(p):
				pending = append(pending, name)
			}
		}
		if len(running) != wantRunning || len(pending) != wantPending {
			return fmt.Errorf("running %v, pending %v", running, pending)
		}
		return nil
	}, f.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	return running, pending
}

func unschedulable(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// numVFs reads a PF's sriov_numvfs on the fixture host.
func (f *fixtureRun) numVFs(t *testing.T, pf string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.root, "sys/bus/pci/devices", pf, "sriov_numvfs"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
