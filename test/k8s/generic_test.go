//go:build e2enode

package k8se2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cdi-exec/plugins/test/fixture"
)

// kvmConf is the generic plugin's kvm type as the real-node tests serve
// it: this machine's /dev/kvm, shared by up to shares pods.
func kvmConf(shares int) string {
	return fmt.Sprintf(`{"cdiVersion": "0.0.2", "name": "kvm", "type": "kvm", "plugin": "generic", "args": {"rules": [{"paths": ["/dev/kvm"], "shares": %d, "permissions": "rw"}]}}`, shares)
}

const (
	kvmDriver = "kvm.cdi-exec.io"
	// kvmLoop opens /dev/kvm read-write and says so, then waits.
	kvmLoop = `if exec 3<>/dev/kvm; then echo kvm-opened; else echo kvm-failed; fi; while :; do sleep 1; done`
)

// TestClusterDRAGenericKVM deploys the DRA mode as TestClusterDRATTYs
// does, with the generic plugin's kvm type: the node's real /dev/kvm with
// three shares. Three pods, each with a claim of one share, run at once
// and each opens /dev/kvm; a fourth pod waits, unscheduled, until one of
// them is deleted, and then runs too (kvmShares).
func TestClusterDRAGenericKVM(t *testing.T) { kvmShares(t, 3) }

// TestClusterKVMShares is TestClusterDRAGenericKVM at the size of a VM
// node: 24 shares, 24 pods each holding one, the 25th waiting until one
// is deleted (kvmShares).
func TestClusterKVMShares(t *testing.T) { kvmShares(t, 24) }

// kvmShares serves /dev/kvm with n shares and runs n+1 pods with a claim
// of one share each: n open /dev/kvm, the last waits (Pending) and runs
// once one of the n is deleted; the plugin holds a share for each of the
// n claims. The slice's shape depends on the release (apiMinor): from
// 1.36 the API server serves consumable capacity, and the unit is one
// device with allowMultipleAllocations and a capacity of n shares, which
// every claim is allocated with a shareID of its own; before, where
// DRAConsumableCapacity is off, it is n devices, one per share.
func kvmShares(t *testing.T, n int) {
	if fi, err := os.Stat("/dev/kvm"); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Skipf("this machine has no /dev/kvm: %v", err)
	}
	ctx, d := newDRARun(t, 15*time.Minute)
	driverPod := d.deployKVM(ctx, t, kvmConf(n))
	minor := d.apiMinor(ctx, t)
	consumable := minor >= 36
	want := n
	if consumable {
		want = 1
	}
	devices := d.waitDevices(ctx, t, kvmDriver, want)
	t.Logf("driver pod %s; on 1.%d the kvm slice lists %d devices: %v", driverPod, minor, len(devices), devices)
	if consumable {
		dev := d.sliceDevice(ctx, t, kvmDriver, "kvm")
		shares, ok := dev.Capacity["shares"]
		if dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations || !ok || shares.Value.Value() != int64(n) {
			t.Fatalf("the kvm device on 1.%d: allowMultipleAllocations %v, capacity %+v; want one device of %d shares", minor, dev.AllowMultipleAllocations, dev.Capacity, n)
		}
	}

	f := &features{draRun: d}
	pods := make([]string, n+1)
	for i := range pods {
		pods[i] = fmt.Sprintf("vm%d", i+1)
	}
	f.yaml(ctx, t, kvmClaimPods(pods))
	var running []string
	err := waitFor(ctx, fmt.Sprintf("%d of the %d pods to open /dev/kvm", n, n+1), func(ctx context.Context) error {
		running = nil
		for _, p := range pods {
			if d.kvmOpened(ctx, p) {
				running = append(running, p)
			}
		}
		if len(running) != n {
			return fmt.Errorf("%d opened it", len(running))
		}
		return nil
	}, d.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	waiting := ""
	for _, p := range pods {
		if !slices.Contains(running, p) {
			waiting = p
		}
	}
	time.Sleep(5 * time.Second)
	if p, _ := d.c.WaitPod(ctx, "default", waiting, func(Pod, bool) error { return nil }); p.Status.Phase != "Pending" {
		t.Fatalf("the last pod %s is %s, want Pending", waiting, p.Status.Phase)
	}
	held := f.holders(ctx, t)
	t.Logf("%d pods opened /dev/kvm, %s waits; the plugin holds shares for %d claims", len(running), waiting, len(held))
	if len(held) != n {
		t.Fatalf("the plugin holds %v, want %d claims on kvm", held, n)
	}
	if consumable {
		shareIDs := map[string]bool{}
		for _, p := range running {
			for _, r := range f.claim(ctx, t, "default", p).Status.Allocation.Devices.Results {
				if r.Device != "kvm" || r.ShareID == nil {
					t.Fatalf("claim %s was allocated %+v, want a share of kvm", p, r)
				}
				shareIDs[string(*r.ShareID)] = true
			}
		}
		if len(shareIDs) != n {
			t.Fatalf("%d distinct shareIDs among %d claims", len(shareIDs), n)
		}
	}
	if _, err := d.c.Kubectl(ctx, "delete", "pod", running[0], "--wait=false", "--grace-period=0"); err != nil {
		t.Fatal(err)
	}
	d.waitKVMOpened(ctx, t, waiting)
	t.Logf("after %s was deleted, %s opened /dev/kvm", running[0], waiting)

	// Extended resources, in either shape: two pods deleted free two
	// shares, and a pod that asks for cdi-exec.io/kvm in its limits, with
	// no claim of its own, gets one of them.
	for _, p := range running[1:3] {
		if _, err := d.c.Kubectl(ctx, "delete", "pod", p, "--wait=false", "--grace-period=0"); err != nil {
			t.Fatal(err)
		}
	}
	f.yaml(ctx, t, kvmExtendedPod("extended"))
	d.waitKVMOpened(ctx, t, "extended") // it asks for cdi-exec.io/kvm: 1
	var p corev1.Pod
	if err := d.c.Get(ctx, "/api/v1/namespaces/default/pods/extended", &p); err != nil {
		t.Fatal(err)
	}
	if p.Status.ExtendedResourceClaimStatus == nil || p.Status.ExtendedResourceClaimStatus.ResourceClaimName == "" {
		t.Fatalf("the pod asking for cdi-exec.io/kvm has no extended resource claim: %+v", p.Status.ExtendedResourceClaimStatus)
	}
	ext := f.claim(ctx, t, "default", p.Status.ExtendedResourceClaimStatus.ResourceClaimName)
	results := ext.Status.Allocation.Devices.Results
	if len(results) != 1 || results[0].Device == "" || (consumable && results[0].ShareID == nil) {
		t.Fatalf("the extended resource claim %s was allocated %+v, want one kvm device (a share of it on 1.%d)", ext.Name, results, minor)
	}
	err = waitFor(ctx, fmt.Sprintf("the plugin to hold shares for %d claims", n-1), func(ctx context.Context) error {
		if h := f.holders(ctx, t); len(h) != n-1 || len(h[string(ext.UID)]) != 1 {
			return fmt.Errorf("the plugin holds %v", h)
		}
		return nil
	}, d.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the pod asking for cdi-exec.io/kvm: 1 opened /dev/kvm through claim %s, allocated %s", ext.Name, results[0].Device)
}

// kvmExtendedPod is the YAML of a pod that asks for one kvm unit as an
// extended resource (the DeviceClass's extendedResourceName) and opens
// /dev/kvm.
func kvmExtendedPod(name string) string {
	return fmt.Sprintf("---\napiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: default}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  restartPolicy: Never\n"+
		"  containers:\n  - name: c\n    image: %s\n    imagePullPolicy: Never\n    command: [\"/bin/sh\", \"-c\", %q]\n    resources: {limits: {cdi-exec.io/kvm: 1}}\n",
		name, Image, kvmLoop)
}

// TestClusterKVMUnlimited serves /dev/kvm with "shares": "unlimited": the
// driver reads its node's allocatable pods (a GET of its own Node) and
// offers that many shares, as one device's capacity from 1.36 and as
// that many devices before; three pods with a claim each open /dev/kvm,
// and the plugin holds a share for each claim.
func TestClusterKVMUnlimited(t *testing.T) {
	if fi, err := os.Stat("/dev/kvm"); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Skipf("this machine has no /dev/kvm: %v", err)
	}
	ctx, d := newDRARun(t, 10*time.Minute)
	conf := `{"cdiVersion": "0.0.2", "name": "kvm", "type": "kvm", "plugin": "generic", "args": {"rules": [{"paths": ["/dev/kvm"], "shares": "unlimited", "permissions": "rw"}]}}`
	d.deployKVM(ctx, t, conf)
	var node corev1.Node
	if err := d.c.Get(ctx, "/api/v1/nodes/"+NodeName, &node); err != nil {
		t.Fatal(err)
	}
	pods := node.Status.Allocatable.Pods().Value()
	minor := d.apiMinor(ctx, t)
	if minor >= 36 {
		d.waitDevices(ctx, t, kvmDriver, 1)
		err := waitFor(ctx, fmt.Sprintf("the kvm device's capacity to be the node's %d allocatable pods", pods), func(ctx context.Context) error {
			dev := d.sliceDevice(ctx, t, kvmDriver, "kvm")
			if shares, ok := dev.Capacity["shares"]; !ok || shares.Value.Value() != pods {
				return fmt.Errorf("capacity %+v", dev.Capacity)
			}
			return nil
		}, d.c.Kubelet)
		if err != nil {
			t.Fatal(err)
		}
	} else {
		d.waitDevices(ctx, t, kvmDriver, int(pods))
	}
	t.Logf("on 1.%d the node's %d allocatable pods are the kvm unit's shares", minor, pods)
	f := &features{draRun: d}
	names := []string{"u1", "u2", "u3"}
	f.yaml(ctx, t, kvmClaimPods(names))
	d.waitKVMOpened(ctx, t, names...)
	if h := f.holders(ctx, t); len(h) != len(names) {
		t.Fatalf("the plugin holds %v, want a share for each of %d claims", h, len(names))
	}
}

// deployKVM deploys the DRA mode with the kvm type of conf, which
// cdictl on the test's side reads too, and returns the driver's pod.
func (d *draRun) deployKVM(ctx context.Context, t *testing.T, conf string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(d.b.conf, "kvm.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.b.conf, "kvm.d", "generic.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	d.loadImage(ctx, t)
	d.deployType(ctx, t, "kvm", conf, "")
	return d.waitDriver(ctx, t, "")
}

// apiMinor is the API server's minor version: 37 for 1.37.2.
func (d *draRun) apiMinor(ctx context.Context, t *testing.T) int {
	t.Helper()
	var v struct {
		Minor string `json:"minor"`
	}
	if err := d.c.Get(ctx, "/version", &v); err != nil {
		t.Fatal(err)
	}
	m, err := strconv.Atoi(strings.TrimSuffix(v.Minor, "+"))
	if err != nil {
		t.Fatalf("the API server's minor version %q: %v", v.Minor, err)
	}
	return m
}

// sliceDevice returns the device called name of the node's ResourceSlices
// of driver.
func (d *draRun) sliceDevice(ctx context.Context, t *testing.T, driver, name string) resourceapi.Device {
	t.Helper()
	var l resourceapi.ResourceSliceList
	if err := d.c.Get(ctx, "/apis/resource.k8s.io/v1/resourceslices", &l); err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Items {
		if s.Spec.Driver == driver && s.Spec.NodeName != nil && *s.Spec.NodeName == NodeName {
			for _, dev := range s.Spec.Devices {
				if dev.Name == name {
					return dev
				}
			}
		}
	}
	t.Fatalf("no device %s in the slices of %s", name, driver)
	return resourceapi.Device{}
}

// kvmPod is the YAML of a pod with the claim of its name that opens
// /dev/kvm.
func kvmPod(name string) string {
	return fmt.Sprintf("---\napiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: default}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  restartPolicy: Never\n"+
		"  resourceClaims:\n  - {name: kvm, resourceClaimName: %s}\n  containers:\n  - name: c\n    image: %s\n    imagePullPolicy: Never\n    command: [\"/bin/sh\", \"-c\", %q]\n    resources: {claims: [{name: kvm}]}\n",
		name, name, Image, kvmLoop)
}

// kvmClaimPods is, for each name, a claim of that name for one kvm device
// (or share) and a pod of that name that opens /dev/kvm through it.
func kvmClaimPods(names []string) string {
	var doc strings.Builder
	for _, p := range names {
		doc.WriteString(claimYAML("default", p, "requests:\n- name: r\n  exactly: {deviceClassName: "+kvmDriver+"}"))
		doc.WriteString(kvmPod(p))
	}
	return doc.String()
}

// waitKVMOpened waits until each of the pods has opened /dev/kvm.
func (d *draRun) waitKVMOpened(ctx context.Context, t *testing.T, pods ...string) {
	t.Helper()
	err := waitFor(ctx, strings.Join(pods, ", ")+" to open /dev/kvm", func(ctx context.Context) error {
		for _, p := range pods {
			if !d.kvmOpened(ctx, p) {
				return fmt.Errorf("%s has not opened it", p)
			}
		}
		return nil
	}, d.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
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

// TestClusterDRAGenericSerial deploys the DRA mode with its host's /sys
// and /dev taken from a fixture host with three CH340 USB serial
// adapters (serials A50285BI and B71234XY, and one without), served by the
// generic plugin as the usbserial type. A claim that selects the adapter
// with serial B71234XY by its usbSerial attribute, through CEL, gets that
// adapter: the scheduler allocates it, the plugin holds it under the
// claim's UID, and the pod sees /dev/ttyUSB1 with its numbers (188:1).
func TestClusterDRAGenericSerial(t *testing.T) {
	const serialDriver = "usbserial.cdi-exec.io"
	serialConf := `{"cdiVersion": "0.0.2", "name": "usb serial", "type": "usbserial", "plugin": "generic", "args": {"rules": [{"paths": ["/dev/ttyUSB*"], "usb": {"vendor": "1a86"}}]}}`
	ctx, d := newDRARun(t, 15*time.Minute)
	host := filepath.Join(d.c.Dir, "fixture-host")
	if err := os.MkdirAll(host, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := fixture.NodesIn(host); got != fixture.RealNodes {
		t.Skipf("needs real device nodes (CAP_MKNOD), and this machine makes %s", got)
	}
	h := fixture.Host{USBHosts: []fixture.USBHost{{Addr: "0000:00:14.0", NUMA: fixture.Int(0)}},
		USBDevices: []fixture.USBDevice{fixture.CH340("1", 0, "A50285BI"), fixture.CH340("2", 1, "B71234XY"), fixture.CH340("3", 2, "")}}
	if err := h.Build(host); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(d.b.conf, "usbserial.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.b.conf, "usbserial.d", "generic.conf"), []byte(serialConf), 0o644); err != nil {
		t.Fatal(err)
	}
	d.loadImage(ctx, t)
	d.deployType(ctx, t, "usbserial", serialConf, host)
	driverPod := d.waitDriver(ctx, t, "")
	adapters := d.waitDevices(ctx, t, serialDriver, 3)
	t.Logf("driver pod %s; the usbserial slice lists %v", driverPod, adapters)

	f := &features{draRun: d}
	loop := `while :; do echo "devs $(stat -c '%n=%t:%T' /dev/ttyUSB* 2>/dev/null | tr '\n' ' ')"; sleep 1; done`
	f.yaml(ctx, t, claimYAML("default", "by-serial", `
requests:
- name: r
  exactly:
    deviceClassName: `+serialDriver+`
    selectors: [{cel: {expression: 'device.attributes["`+serialDriver+`"].usbSerial == "B71234XY"'}}]`)+
		fmt.Sprintf("---\napiVersion: v1\nkind: Pod\nmetadata: {name: by-serial, namespace: default}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  restartPolicy: Never\n"+
			"  resourceClaims:\n  - {name: s, resourceClaimName: by-serial}\n  containers:\n  - name: c\n    image: %s\n    imagePullPolicy: Never\n    command: [\"/bin/sh\", \"-c\", %q]\n    resources: {claims: [{name: s}]}\n", Image, loop))
	if _, err := d.c.WaitPod(ctx, "default", "by-serial", Running); err != nil {
		t.Fatal(err)
	}
	line, err := d.c.WaitLogLine(ctx, "by-serial", "c", "devs ")
	if err != nil {
		t.Fatal(err)
	}
	if line != "devs /dev/ttyUSB1=bc:1" {
		t.Fatalf("the pod sees %q, want /dev/ttyUSB1 (188:1) only", line)
	}
	claim := f.claim(ctx, t, "default", "by-serial")
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 || claim.Status.Allocation.Devices.Results[0].Device != "x-1a86-27523-2-b71234-x-y" {
		t.Fatalf("the claim was allocated %+v", claim.Status.Allocation)
	}
	held := f.holders(ctx, t)
	if keys := held[string(claim.UID)]; !slices.Equal(keys, []string{"1a86:7523:B71234XY"}) {
		t.Fatalf("the plugin holds %v", held)
	}
	t.Logf("the claim with usbSerial == B71234XY got %s; the pod sees %q", claim.Status.Allocation.Devices.Results[0].Device, line)
}

// deployType applies deploy/'s DRA manifests with one more type of the
// generic plugin, <typ>.cdi-exec.io with conf (its config, its DeviceClass
// and its plugin directory), and, when host is set, /sys and /dev of that
// fixture host; the DeviceClass goes when the test ends.
func (d *draRun) deployType(ctx context.Context, t *testing.T, typ, conf, host string) {
	t.Helper()
	driver, extended := typ+".cdi-exec.io", "cdi-exec.io/"+typ
	objs := d.driverManifests(t)
	for _, o := range objs {
		switch obj := o.(type) {
		case *corev1.ConfigMap:
			obj.Data[typ+".conf"] = conf
		case *appsv1.DaemonSet:
			for i := range obj.Spec.Template.Spec.Volumes {
				v := &obj.Spec.Template.Spec.Volumes[i]
				switch {
				case v.ConfigMap != nil:
					v.ConfigMap.Items = append(v.ConfigMap.Items, corev1.KeyToPath{Key: typ + ".conf", Path: typ + ".d/generic.conf"})
				case host != "" && v.HostPath != nil && (v.HostPath.Path == "/sys" || v.HostPath.Path == "/dev"):
					v.HostPath.Path = filepath.Join(host, v.HostPath.Path)
				}
			}
			pluginDir(obj, driver)
		}
	}
	objs = append(objs, &resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + driver + `"`}}},
			// As the chart's classes: a pod may ask for the type in its
			// limits (DRAExtendedResource).
			ExtendedResourceName: &extended},
	})
	d.apply(ctx, t, objs)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = d.c.Kubectl(ctx, "delete", "deviceclass", driver, "--ignore-not-found")
	})
}
