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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The generic plugin's kvm type as the real-node tests serve it: this
// machine's /dev/kvm, shared by up to three pods.
const (
	kvmDriver = "kvm.cdi-exec.io"
	kvmConf   = `{"cdiVersion": "0.0.2", "name": "kvm", "type": "kvm", "plugin": "generic", "args": {"rules": [{"paths": ["/dev/kvm"], "shares": 3, "permissions": "rw"}]}}`
	// kvmLoop opens /dev/kvm read-write and says so, then waits.
	kvmLoop = `if exec 3<>/dev/kvm; then echo kvm-opened; else echo kvm-failed; fi; while :; do sleep 1; done`
)

// TestClusterDRAGenericKVM deploys the DRA mode as TestClusterDRATTYs
// does, with the generic plugin's kvm type beside the ttys: the node's
// real /dev/kvm with three shares. The driver offers it as three devices;
// three pods, each with a claim of one, run at once and each opens
// /dev/kvm; a fourth pod waits, unscheduled, until one of them is
// deleted, and then runs too.
func TestClusterDRAGenericKVM(t *testing.T) {
	if fi, err := os.Stat("/dev/kvm"); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Skipf("this machine has no /dev/kvm: %v", err)
	}
	ctx, d := newDRARun(t, 15*time.Minute)
	if err := os.MkdirAll(filepath.Join(d.b.conf, "kvm.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.b.conf, "kvm.d", "generic.conf"), []byte(kvmConf), 0o644); err != nil {
		t.Fatal(err)
	}
	d.loadImage(ctx, t)
	objs := d.driverManifests(t)
	for _, o := range objs {
		switch obj := o.(type) {
		case *corev1.ConfigMap:
			obj.Data["kvm.conf"] = kvmConf
		case *appsv1.DaemonSet:
			for i := range obj.Spec.Template.Spec.Volumes {
				if cm := obj.Spec.Template.Spec.Volumes[i].ConfigMap; cm != nil {
					cm.Items = append(cm.Items, corev1.KeyToPath{Key: "kvm.conf", Path: "kvm.d/generic.conf"})
				}
			}
		}
	}
	objs = append(objs, &resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: kvmDriver},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + kvmDriver + `"`}}}},
	})
	d.apply(ctx, t, objs)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = d.c.Kubectl(ctx, "delete", "deviceclass", kvmDriver, "--ignore-not-found")
	})
	driverPod := d.waitDriver(ctx, t, "")
	shares := d.waitDevices(ctx, t, kvmDriver, 3)
	t.Logf("driver pod %s; the kvm slice lists %v", driverPod, shares)

	f := &features{draRun: d}
	var doc strings.Builder
	for i := 1; i <= 4; i++ {
		name := fmt.Sprintf("vm%d", i)
		doc.WriteString(claimYAML("default", name, "requests:\n- name: r\n  exactly: {deviceClassName: "+kvmDriver+"}"))
		doc.WriteString(kvmPod(name))
	}
	f.yaml(ctx, t, doc.String())
	var running []string
	err := waitFor(ctx, "three of the four pods to open /dev/kvm", func(ctx context.Context) error {
		running = nil
		for i := 1; i <= 4; i++ {
			if d.kvmOpened(ctx, fmt.Sprintf("vm%d", i)) {
				running = append(running, fmt.Sprintf("vm%d", i))
			}
		}
		if len(running) != 3 {
			return fmt.Errorf("%v opened it", running)
		}
		return nil
	}, d.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	waiting := ""
	for i := 1; i <= 4; i++ {
		if name := fmt.Sprintf("vm%d", i); !slices.Contains(running, name) {
			waiting = name
		}
	}
	time.Sleep(5 * time.Second)
	if p, _ := d.c.WaitPod(ctx, "default", waiting, func(Pod, bool) error { return nil }); p.Status.Phase != "Pending" {
		t.Fatalf("the fourth pod %s is %s, want Pending", waiting, p.Status.Phase)
	}
	held := f.holders(ctx, t)
	t.Logf("%v opened /dev/kvm, %s waits; the plugin holds %v", running, waiting, held)
	if len(held) != 3 {
		t.Fatalf("the plugin holds %v, want three claims on kvm", held)
	}
	if _, err := d.c.Kubectl(ctx, "delete", "pod", running[0], "--wait=false", "--grace-period=0"); err != nil {
		t.Fatal(err)
	}
	err = waitFor(ctx, "the fourth pod to open /dev/kvm", func(ctx context.Context) error {
		if !d.kvmOpened(ctx, waiting) {
			return fmt.Errorf("%s has not opened it", waiting)
		}
		return nil
	}, d.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after %s was deleted, %s opened /dev/kvm", running[0], waiting)
}

// kvmPod is the YAML of a pod with the claim of its name that opens
// /dev/kvm.
func kvmPod(name string) string {
	return fmt.Sprintf("---\napiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: default}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  restartPolicy: Never\n"+
		"  resourceClaims:\n  - {name: kvm, resourceClaimName: %s}\n  containers:\n  - name: c\n    image: %s\n    imagePullPolicy: Never\n    command: [\"/bin/sh\", \"-c\", %q]\n    resources: {claims: [{name: kvm}]}\n",
		name, name, Image, kvmLoop)
}

// kvmOpened reports whether the pod's container said it opened /dev/kvm.
func (d *draRun) kvmOpened(ctx context.Context, pod string) bool {
	b, err := d.c.api.get(ctx, d.c.url("/containerLogs/default/"+pod+"/c"))
	return err == nil && strings.Contains(string(b), "kvm-opened")
}

// waitDevices waits until the node's ResourceSlices of driver list n
// devices, and returns their names.
func (d *draRun) waitDevices(ctx context.Context, t *testing.T, driver string, n int) []string {
	t.Helper()
	var names []string
	err := waitFor(ctx, driver+"'s ResourceSlice", func(ctx context.Context) error {
		var l resourceapi.ResourceSliceList
		if err := d.c.Get(ctx, "/apis/resource.k8s.io/v1/resourceslices", &l); err != nil {
			return err
		}
		names = nil
		for _, s := range l.Items {
			if s.Spec.Driver == driver && s.Spec.NodeName != nil && *s.Spec.NodeName == NodeName {
				for _, dev := range s.Spec.Devices {
					names = append(names, dev.Name)
				}
			}
		}
		if len(names) != n {
			return fmt.Errorf("the slices list %v, want %d devices", names, n)
		}
		return nil
	}, d.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	return names
}
