//go:build e2enode

package k8se2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// The names the feature tests give things.
const (
	adminNamespace = "cdi-e2e-admin" // labelled for admin access
	taintKey       = draDriver + "/unusable"
)

// TestClusterDRAFeatures deploys the DRA mode as TestClusterDRATTYs does
// and drives, with real pods, what DRA offers on current Kubernetes:
//   - PerRequest: a claim with requests r1 and r2 of one tty each; a
//     container naming r1 sees exactly r1's tty, one naming r2 exactly
//     r2's, and two containers naming the whole claim see both;
//   - SharedByTwoPods: one ResourceClaim in two pods, which see the same
//     tty, held once;
//   - ExtendedResource: a pod with resources.limits cdi-exec.io/tty and no
//     claim; each container sees its own ttys, freed within seconds of the
//     pod's deletion;
//   - AdminAccess: a claim with adminAccess in a namespace labelled for it
//     sees the tty another pod holds; cdictl ls shows only the holder,
//     and the admin claim's own spec goes with its pod, the holder's
//     stays;
//   - CELOnKey: a selector on the key attribute gets exactly that tty;
//   - StatusAndMetadata: a prepared claim's status.devices lists its tty,
//     Ready, with the key and node in data, cleared when the pod goes;
//     the container reads the tty's attributes in its metadata file;
//   - FirstAvailable: a request whose first alternative cannot be met
//     gets the second;
//   - DeviceConfigRejected: a claim's DeviceConfig with a field the tty
//     plugins do not take per claim fails the prepare, naming the field;
//   - Taint: a held tty whose /dev node disappears stays in the slice with
//     a taint; the holder keeps running and shows the device Unhealthy,
//     and a new claim for it stays unallocated until the node is back.
func TestClusterDRAFeatures(t *testing.T) {
	ctx, d := newDRARun(t, 30*time.Minute)
	d.loadImage(ctx, t)
	d.apply(ctx, t, d.driverManifests(t))
	driverPod := d.waitDriver(ctx, t, "")
	free := d.waitSlice(ctx, t)
	t.Logf("driver pod %s; the slice lists %v", driverPod, free)
	if len(free) < 4 {
		t.Skipf("%d free ttys; the scenarios need four", len(free))
	}
	f := &features{draRun: d, free: free}

	t.Run("PerRequest", f.perRequest)
	t.Run("SharedByTwoPods", f.sharedByTwoPods)
	t.Run("ExtendedResource", f.extendedResource)
	t.Run("AdminAccess", f.adminAccess)
	t.Run("CELOnKey", f.celOnKey)
	t.Run("StatusAndMetadata", f.statusAndMetadata)
	t.Run("FirstAvailable", f.firstAvailable)
	t.Run("DeviceConfigRejected", f.deviceConfigRejected)
	t.Run("Taint", f.taint)

	log := d.waitLog(ctx, t, driverPod, `"serving" driver=`)
	for _, bad := range []string{"forbidden", "panic"} {
		if strings.Contains(log, bad) {
			t.Errorf("the driver logged %q:\n%s", bad, log)
		}
	}
}

// features runs the scenarios on one deployment.
type features struct {
	*draRun
	free []string // the ttys the slice lists, sorted
}

// ctx is a scenario's deadline. When the scenario ends, after the
// deletions of what it applied (yaml), it waits until the plugins hold
// nothing and every spec file is gone.
func (f *features) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	t.Cleanup(cancel)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		f.waitFreed(ctx, t, nil)
	})
	return ctx
}

// yaml applies manifests given as YAML and deletes what they made when
// the scenario ends.
func (d *draRun) yaml(ctx context.Context, t *testing.T, doc string) {
	t.Helper()
	file := filepath.Join(d.c.Dir, fmt.Sprintf("apply-%d.yaml", time.Now().UnixNano()))
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := d.c.Kubectl(ctx, "apply", "-f", file); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("kubectl apply:\n%s", strings.TrimSpace(out))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := d.c.Kubectl(ctx, "delete", "-f", file, "--ignore-not-found", "--grace-period=0", "--wait=true", "--timeout=2m"); err != nil {
			t.Error(err)
		}
	})
}

// pod is the YAML of a pod on the node's one image and the host's
// network that prints its ttys every second from each container.
// claims are its resourceClaims entries ("name: x\n  resourceClaimName:
// y"), containers its containers' resources blocks by name.
func pod(ns, name string, claims []string, containers map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: %s}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 0\n  restartPolicy: Never\n", name, ns)
	if len(claims) > 0 {
		b.WriteString("  resourceClaims:\n")
		for _, c := range claims {
			fmt.Fprintf(&b, "  - %s\n", c)
		}
	}
	b.WriteString("  containers:\n")
	for _, n := range slices.Sorted(maps.Keys(containers)) {
		fmt.Fprintf(&b, "  - name: %s\n    image: %s\n    imagePullPolicy: Never\n    command: [\"/bin/sh\", \"-c\", %q]\n    resources:\n%s\n",
			n, Image, devLoop, indent(containers[n], "      "))
	}
	return b.String()
}

func indent(s, by string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := range lines {
		lines[i] = by + lines[i]
	}
	return strings.Join(lines, "\n")
}

// claimYAML is a ResourceClaim with the given devices block.
func claimYAML(ns, name, devices string) string {
	return fmt.Sprintf("---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: %s, namespace: %s}\nspec:\n  devices:\n%s\n", name, ns, indent(devices, "    "))
}

// keyIs is a CEL selector on the key attribute.
func keyIs(key string) string {
	return fmt.Sprintf(`device.attributes["%s"].key == "%s"`, draDriver, key)
}

// ctrTTYs waits until the container has printed a devs line and returns
// the ttys of the last one, by name, sorted, after checking each has the
// host's device numbers.
func (f *features) ctrTTYs(ctx context.Context, t *testing.T, ns, podName, ctr string) []string {
	t.Helper()
	if _, err := f.c.WaitPod(ctx, ns, podName, Running); err != nil {
		t.Fatal(err)
	}
	var seen []string
	err := waitFor(ctx, fmt.Sprintf("a devs line from %s/%s/%s", ns, podName, ctr), func(ctx context.Context) error {
		b, err := f.c.api.get(ctx, f.c.url("/containerLogs/"+ns+"/"+podName+"/"+ctr))
		if err != nil {
			return err
		}
		lines := strings.Split(string(b), "\n")
		for i := len(lines) - 2; i >= 0; i-- {
			if strings.HasPrefix(lines[i], "devs") {
				seen = nil
				for _, fld := range strings.Fields(strings.TrimPrefix(lines[i], "devs")) {
					path, dev, _ := strings.Cut(fld, "=")
					name := filepath.Base(path)
					if want := hexDev(t, name); dev != want {
						return fmt.Errorf("%s is %s in the container, %s on the host", path, dev, want)
					}
					seen = append(seen, name)
				}
				slices.Sort(seen)
				return nil
			}
		}
		return fmt.Errorf("no devs line in %q", b)
	}, f.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	return seen
}

// claim returns a ResourceClaim.
func (f *features) claim(ctx context.Context, t *testing.T, ns, name string) *resourceapi.ResourceClaim {
	t.Helper()
	var c resourceapi.ResourceClaim
	if err := f.c.Get(ctx, "/apis/resource.k8s.io/v1/namespaces/"+ns+"/resourceclaims/"+name, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// holders returns the plugins' allocations by request-id.
func (f *features) holders(ctx context.Context, t *testing.T) map[string][]string {
	out := map[string][]string{}
	for _, a := range f.b.allocations(ctx, t) {
		out[a.RequestID] = slices.Sorted(slices.Values(a.DeviceKeys))
	}
	return out
}

func (f *features) perRequest(t *testing.T) {
	ctx := f.ctx(t)
	f.yaml(ctx, t, claimYAML("default", "two-requests", `
requests:
- name: r1
  exactly: {deviceClassName: tty.cdi-exec.io, count: 1}
- name: r2
  exactly: {deviceClassName: tty.cdi-exec.io, count: 1}`)+
		pod("default", "per-request", []string{"name: t\n    resourceClaimName: two-requests"}, map[string]string{
			"c1":     "claims: [{name: t, request: r1}]",
			"c2":     "claims: [{name: t, request: r2}]",
			"whole1": "claims: [{name: t}]",
			"whole2": "claims: [{name: t}]",
		}))
	c1 := f.ctrTTYs(ctx, t, "default", "per-request", "c1")
	c2 := f.ctrTTYs(ctx, t, "default", "per-request", "c2")
	claim := f.claim(ctx, t, "default", "two-requests")
	byRequest := map[string][]string{}
	for _, r := range claim.Status.Allocation.Devices.Results {
		byRequest[r.Request] = append(byRequest[r.Request], r.Device)
	}
	if len(c1) != 1 || len(c2) != 1 || c1[0] == c2[0] || !slices.Equal(c1, byRequest["r1"]) || !slices.Equal(c2, byRequest["r2"]) {
		t.Fatalf("c1 sees %v, c2 sees %v; the claim was allocated %v", c1, c2, byRequest)
	}
	both := slices.Sorted(slices.Values(append(slices.Clone(c1), c2...)))
	for _, ctr := range []string{"whole1", "whole2"} {
		if got := f.ctrTTYs(ctx, t, "default", "per-request", ctr); !slices.Equal(got, both) {
			t.Fatalf("%s, naming the whole claim, sees %v, want %v", ctr, got, both)
		}
	}
	if h := f.holders(ctx, t); len(h) != 1 || !slices.Equal(h[string(claim.UID)], both) {
		t.Fatalf("the plugins hold %v, want %v under the claim's UID %s, one ADD", h, both, claim.UID)
	}
	t.Logf("r1 → c1 sees %v, r2 → c2 sees %v, the whole claim %v", c1, c2, both)
}

func (f *features) sharedByTwoPods(t *testing.T) {
	ctx := f.ctx(t)
	ref := []string{"name: t\n    resourceClaimName: shared"}
	res := map[string]string{"c": "claims: [{name: t}]"}
	f.yaml(ctx, t, claimYAML("default", "shared", `
requests:
- name: r
  exactly: {deviceClassName: tty.cdi-exec.io, count: 1}`)+pod("default", "sharer-1", ref, res)+pod("default", "sharer-2", ref, res))
	a := f.ctrTTYs(ctx, t, "default", "sharer-1", "c")
	b := f.ctrTTYs(ctx, t, "default", "sharer-2", "c")
	claim := f.claim(ctx, t, "default", "shared")
	if len(a) != 1 || !slices.Equal(a, b) {
		t.Fatalf("the pods sharing a claim see %v and %v", a, b)
	}
	if h := f.holders(ctx, t); len(h) != 1 || !slices.Equal(h[string(claim.UID)], a) {
		t.Fatalf("the plugins hold %v, want %v once, under %s", h, a, claim.UID)
	}
}

func (f *features) extendedResource(t *testing.T) {
	ctx := f.ctx(t)
	doc := pod("default", "extended", nil, map[string]string{
		"two": "limits: {cdi-exec.io/tty: 2}",
		"one": "limits: {cdi-exec.io/tty: 1}",
	})
	f.yaml(ctx, t, doc)
	two := f.ctrTTYs(ctx, t, "default", "extended", "two")
	one := f.ctrTTYs(ctx, t, "default", "extended", "one")
	if len(two) != 2 || len(one) != 1 || slices.Contains(two, one[0]) {
		t.Fatalf("the containers asking for 2 and 1 see %v and %v", two, one)
	}
	var n corev1.Node
	if err := f.c.Get(ctx, "/api/v1/nodes/"+NodeName, &n); err != nil {
		t.Fatal(err)
	}
	if q, ok := n.Status.Allocatable["cdi-exec.io/tty"]; ok {
		t.Fatalf("the node advertises cdi-exec.io/tty %v: the device-plugin mode is not to run here", q.String())
	}
	if h := f.holders(ctx, t); len(h) != 1 {
		t.Fatalf("the plugins hold %v, want one claim", h)
	}
	start := time.Now()
	if _, err := f.c.Kubectl(ctx, "delete", "pod", "extended", "--grace-period=0", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	f.waitFreed(ctx, t, append(two, one...))
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("freed %.1fs after the pod's deletion, want seconds", took.Seconds())
	} else {
		t.Logf("two sees %v, one sees %v; freed %.1fs after the pod's deletion", two, one, took.Seconds())
	}
}

func (f *features) adminAccess(t *testing.T) {
	ctx := f.ctx(t)
	key := f.free[0]
	f.yaml(ctx, t, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels: {resource.kubernetes.io/admin-access: \"true\"}\n", adminNamespace)+
		claimYAML("default", "held", fmt.Sprintf(`
requests:
- name: r
  exactly:
    deviceClassName: tty.cdi-exec.io
    selectors: [{cel: {expression: '%s'}}]`, keyIs(key)))+
		pod("default", "holder", []string{"name: t\n    resourceClaimName: held"}, map[string]string{"c": "claims: [{name: t}]"}))
	if got := f.ctrTTYs(ctx, t, "default", "holder", "c"); !slices.Equal(got, []string{key}) {
		t.Fatalf("the holder sees %v, want %s", got, key)
	}
	holder := f.claim(ctx, t, "default", "held")
	holderSpecs := f.b.specs(t)

	f.yaml(ctx, t, claimYAML(adminNamespace, "watch", fmt.Sprintf(`
requests:
- name: r
  exactly:
    deviceClassName: tty.cdi-exec.io
    adminAccess: true
    selectors: [{cel: {expression: '%s'}}]`, keyIs(key)))+
		pod(adminNamespace, "monitor", []string{"name: t\n    resourceClaimName: watch"}, map[string]string{"c": "claims: [{name: t}]"}))
	if got := f.ctrTTYs(ctx, t, adminNamespace, "monitor", "c"); !slices.Equal(got, []string{key}) {
		t.Fatalf("the admin pod sees %v, want %s", got, key)
	}
	admin := f.claim(ctx, t, adminNamespace, "watch")
	if h := f.holders(ctx, t); len(h) != 1 || !slices.Equal(h[string(holder.UID)], []string{key}) {
		t.Fatalf("cdictl ls shows %v, want only the holder %s with %s", h, holder.UID, key)
	}
	specs := f.b.specs(t)
	var adminSpec string
	for file := range specs {
		if strings.Contains(filepath.Base(file), string(admin.UID)) {
			adminSpec = file
		}
	}
	if adminSpec == "" || !slices.Equal(specs[adminSpec], []string{"/dev/" + key}) {
		t.Fatalf("CDI specs %v: want the driver's own for %s naming /dev/%s", specs, admin.UID, key)
	}

	if _, err := f.c.Kubectl(ctx, "delete", "pod", "-n", adminNamespace, "monitor", "--grace-period=0", "--wait=true"); err != nil {
		t.Fatal(err)
	}
	err := waitFor(ctx, "the admin claim's spec to go", func(ctx context.Context) error {
		if _, err := os.Stat(adminSpec); err == nil {
			return fmt.Errorf("%s is still there", adminSpec)
		}
		return nil
	}, f.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.b.specs(t); fmt.Sprint(got) != fmt.Sprint(holderSpecs) {
		t.Fatalf("after the admin pod went, the specs are %v, were %v", got, holderSpecs)
	}
	if h := f.holders(ctx, t); len(h) != 1 || !slices.Equal(h[string(holder.UID)], []string{key}) {
		t.Fatalf("after the admin pod went, cdictl ls shows %v", h)
	}
	t.Logf("the admin pod saw %s beside its holder %s; its spec %s came and went", key, holder.UID, filepath.Base(adminSpec))
}

func (f *features) celOnKey(t *testing.T) {
	ctx := f.ctx(t)
	key := f.free[len(f.free)-1]
	f.yaml(ctx, t, claimYAML("default", "by-key", fmt.Sprintf(`
requests:
- name: r
  exactly:
    deviceClassName: tty.cdi-exec.io
    selectors: [{cel: {expression: '%s'}}]`, keyIs(key)))+
		pod("default", "by-key", []string{"name: t\n    resourceClaimName: by-key"}, map[string]string{"c": "claims: [{name: t}]"}))
	if got := f.ctrTTYs(ctx, t, "default", "by-key", "c"); !slices.Equal(got, []string{key}) {
		t.Fatalf("the pod sees %v, want %s", got, key)
	}
}

func (f *features) statusAndMetadata(t *testing.T) {
	ctx := f.ctx(t)
	key := f.free[1]
	metadata := "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/described/r/" + draDriver + "-metadata.json"
	f.yaml(ctx, t, claimYAML("default", "described", fmt.Sprintf(`
requests:
- name: r
  exactly:
    deviceClassName: tty.cdi-exec.io
    selectors: [{cel: {expression: '%s'}}]`, keyIs(key)))+fmt.Sprintf(`---
apiVersion: v1
kind: Pod
metadata: {name: described, namespace: default}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  restartPolicy: Never
  resourceClaims:
  - name: t
    resourceClaimName: described
  containers:
  - name: c
    image: %s
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "while :; do echo \"metadata $(tr -d '\\n' < %s)\"; sleep 1; done"]
    resources:
      claims: [{name: t}]
`, Image, metadata))
	if _, err := f.c.WaitPod(ctx, "default", "described", Running); err != nil {
		t.Fatal(err)
	}
	line, err := f.c.WaitLogLine(ctx, "described", "c", "metadata {")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"metadata.resource.k8s.io/v1beta1"`, `"` + key + `"`, `"key"`} {
		if !strings.Contains(line, want) {
			t.Fatalf("the container's metadata file lacks %s: %s", want, line)
		}
	}
	t.Logf("the container reads %s: %s", metadata, strings.TrimPrefix(line, "metadata "))
	var ours resourceapi.AllocatedDeviceStatus
	err = waitFor(ctx, "the claim's device status", func(ctx context.Context) error {
		c := f.claim(ctx, t, "default", "described")
		for _, d := range c.Status.Devices {
			if d.Driver == draDriver && d.Device == key {
				ours = d
			}
		}
		if ours.Driver == "" {
			return fmt.Errorf("status.devices %+v", c.Status.Devices)
		}
		return nil
	}, f.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	if len(ours.Conditions) != 1 || ours.Conditions[0].Type != "Ready" || ours.Conditions[0].Status != "True" ||
		ours.Data == nil || !strings.Contains(string(ours.Data.Raw), `"key":"`+key+`"`) || !strings.Contains(string(ours.Data.Raw), `"/dev/`+key+`"`) {
		t.Fatalf("the claim's status of %s: %+v data %s", key, ours, ours.Data)
	}
	out, err := f.c.Kubectl(ctx, "get", "resourceclaim", "described", "-o", "jsonpath={.status.devices}")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl get resourceclaim described -o jsonpath={.status.devices}: %s", out)
	if _, err := f.c.Kubectl(ctx, "delete", "pod", "described", "--grace-period=0", "--wait=true", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}
	err = waitFor(ctx, "the claim's device status cleared", func(ctx context.Context) error {
		c := f.claim(ctx, t, "default", "described")
		for _, d := range c.Status.Devices {
			if d.Driver == draDriver {
				return fmt.Errorf("status.devices %+v after the unprepare", c.Status.Devices)
			}
		}
		return nil
	}, f.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
}

func (f *features) firstAvailable(t *testing.T) {
	ctx := f.ctx(t)
	f.yaml(ctx, t, claimYAML("default", "alternatives", fmt.Sprintf(`
requests:
- name: r
  firstAvailable:
  - name: missing
    deviceClassName: tty.cdi-exec.io
    selectors: [{cel: {expression: '%s'}}]
  - name: any
    deviceClassName: tty.cdi-exec.io
    count: 1`, keyIs("tty-none")))+
		pod("default", "alternatives", []string{"name: t\n    resourceClaimName: alternatives"}, map[string]string{"c": "claims: [{name: t, request: r}]"}))
	got := f.ctrTTYs(ctx, t, "default", "alternatives", "c")
	claim := f.claim(ctx, t, "default", "alternatives")
	rs := claim.Status.Allocation.Devices.Results
	if len(got) != 1 || len(rs) != 1 || rs[0].Request != "r/any" || rs[0].Device != got[0] {
		t.Fatalf("the pod sees %v; the claim was allocated %+v, want one device for r/any", got, rs)
	}
}

func (f *features) deviceConfigRejected(t *testing.T) {
	ctx := f.ctx(t)
	f.yaml(ctx, t, claimYAML("default", "configured", `
requests:
- name: r
  exactly: {deviceClassName: tty.cdi-exec.io, count: 1}
config:
- opaque:
    driver: tty.cdi-exec.io
    parameters: {apiVersion: cdi-exec.io/v1alpha1, kind: DeviceConfig, want_device_node: [render]}`)+
		pod("default", "configured", []string{"name: t\n    resourceClaimName: configured"}, map[string]string{"c": "claims: [{name: t}]"}))
	var msg string
	err := waitFor(ctx, "the prepare's error in the pod's events", func(ctx context.Context) error {
		var l corev1.EventList
		if err := f.c.Get(ctx, "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dconfigured", &l); err != nil {
			return err
		}
		for _, e := range l.Items {
			if strings.Contains(e.Message, `"want_device_node"`) {
				msg = e.Message
				return nil
			}
		}
		return fmt.Errorf("%d events, none naming the field", len(l.Items))
	}, f.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	if h := f.holders(ctx, t); len(h) != 0 {
		t.Fatalf("the failed prepare left %v held", h)
	}
	t.Logf("event: %s", msg)

	// The driver's own Event on the claim (events.k8s.io, through its
	// ClusterRole).
	err = waitFor(ctx, "the driver's PrepareFailed Event on the claim", func(ctx context.Context) error {
		var l eventsv1.EventList
		if err := f.c.Get(ctx, "/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector=regarding.name%3Dconfigured", &l); err != nil {
			return err
		}
		for _, e := range l.Items {
			if e.Regarding.Kind == "ResourceClaim" && e.Reason == "PrepareFailed" && e.Type == corev1.EventTypeWarning &&
				e.ReportingController == draDriver && strings.Contains(e.Note, `"want_device_node"`) {
				msg = e.Note
				return nil
			}
		}
		return fmt.Errorf("%d events on the claim, none the driver's PrepareFailed", len(l.Items))
	}, f.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the driver's Event on the claim: PrepareFailed: %s", msg)
}

// taint hides a held tty's /dev node (a rename, undone however the test
// ends), and checks the taint, the holder's health and that a new claim
// for the tty waits until it is back.
func (f *features) taint(t *testing.T) {
	ctx := f.ctx(t)
	key := f.free[1]
	// A claim from a template: the 1.35 kubelet reports the health of
	// those only (it looks the claim up in the pod's
	// status.resourceClaimStatuses).
	f.yaml(ctx, t, fmt.Sprintf(`---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: sick, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: r
        exactly:
          deviceClassName: tty.cdi-exec.io
          selectors: [{cel: {expression: '%s'}}]
`, keyIs(key))+
		pod("default", "patient", []string{"name: t\n    resourceClaimTemplateName: sick"}, map[string]string{"c": "claims: [{name: t}]"}))
	if got := f.ctrTTYs(ctx, t, "default", "patient", "c"); !slices.Equal(got, []string{key}) {
		t.Fatalf("the holder sees %v, want %s", got, key)
	}
	before, err := f.c.WaitPod(ctx, "default", "patient", Running)
	if err != nil {
		t.Fatal(err)
	}
	f.health(ctx, t, key, "Healthy")

	node, away := "/dev/"+key, "/dev/.cdi-e2e-away-"+key
	if err := os.Rename(node, away); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			if err := os.Rename(away, node); err != nil {
				t.Errorf("putting %s back: %v", node, err)
			}
			restored = true
		}
	}
	t.Cleanup(restore)
	start := time.Now()
	f.waitTaint(ctx, t, key, true)
	t.Logf("%s tainted %.1fs after its node went", key, time.Since(start).Seconds())
	f.health(ctx, t, key, "Unhealthy")
	t.Logf("the holder shows %s Unhealthy %.1fs after its node went", key, time.Since(start).Seconds())
	now, err := f.c.WaitPod(ctx, "default", "patient", Running)
	if err != nil {
		t.Fatal(err)
	}
	sameContainer(t, "the taint", before, now)

	f.yaml(ctx, t, claimYAML("default", "waiter", fmt.Sprintf(`
requests:
- name: r
  exactly:
    deviceClassName: tty.cdi-exec.io
    selectors: [{cel: {expression: '%s'}}]`, keyIs(key)))+
		pod("default", "waiter", []string{"name: t\n    resourceClaimName: waiter"}, map[string]string{"c": "claims: [{name: t}]"}))
	// The waiter's claim cannot be allocated: the tty is held, and
	// tainted. Once the holder is gone it is only tainted.
	if _, err := f.c.Kubectl(ctx, "delete", "pod", "patient", "--grace-period=0", "--wait=true"); err != nil {
		t.Fatal(err)
	}
	if err := sleep(ctx, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	if c := f.claim(ctx, t, "default", "waiter"); c.Status.Allocation != nil {
		t.Fatalf("the waiter's claim was allocated the tainted %s: %+v", key, c.Status.Allocation)
	}
	if p, _ := f.c.WaitPod(ctx, "default", "waiter", func(Pod, bool) error { return nil }); p.Status.Phase != "Pending" {
		t.Fatalf("the waiter is %s, want Pending", p.Status.Phase)
	}
	restore()
	start = time.Now()
	f.waitTaint(ctx, t, key, false)
	if got := f.ctrTTYs(ctx, t, "default", "waiter", "c"); !slices.Equal(got, []string{key}) {
		t.Fatalf("the waiter sees %v, want %s", got, key)
	}
	t.Logf("%s untainted and the waiter runs %.1fs after its node came back", key, time.Since(start).Seconds())
}

// waitTaint waits until the slice lists the device with the driver's
// taint (NoSchedule, the plugin's reason as value), or without any.
func (f *features) waitTaint(ctx context.Context, t *testing.T, key string, tainted bool) {
	t.Helper()
	err := waitFor(ctx, fmt.Sprintf("%s tainted: %v", key, tainted), func(ctx context.Context) error {
		var l resourceapi.ResourceSliceList
		if err := f.c.Get(ctx, "/apis/resource.k8s.io/v1/resourceslices", &l); err != nil {
			return err
		}
		for _, s := range l.Items {
			if s.Spec.Driver != draDriver {
				continue
			}
			for _, d := range s.Spec.Devices {
				if d.Name != key {
					continue
				}
				switch {
				case !tainted && len(d.Taints) == 0:
					return nil
				case tainted && len(d.Taints) == 1 && d.Taints[0].Key == taintKey &&
					d.Taints[0].Effect == resourceapi.DeviceTaintEffectNoSchedule && d.Taints[0].Value == "no-dev-node-or-not-a-character-device":
					return nil
				}
				return fmt.Errorf("%s has taints %+v", key, d.Taints)
			}
		}
		return fmt.Errorf("%s is not in the slice", key)
	}, f.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
}

// health waits until the holder's container status shows the device with
// the health given (the kubelet's allocatedResourcesStatus, fed by the
// driver's NodeWatchResources stream).
func (f *features) health(ctx context.Context, t *testing.T, key, want string) {
	t.Helper()
	err := waitFor(ctx, fmt.Sprintf("%s %s in the holder's status", key, want), func(ctx context.Context) error {
		var p corev1.Pod
		if err := f.c.Get(ctx, "/api/v1/namespaces/default/pods/patient", &p); err != nil {
			return err
		}
		if len(p.Status.ContainerStatuses) != 1 {
			return fmt.Errorf("container statuses %+v", p.Status.ContainerStatuses)
		}
		cs := p.Status.ContainerStatuses[0]
		for _, ar := range cs.AllocatedResourcesStatus {
			for _, r := range ar.Resources {
				// The kubelet names a device by its CDI id, <kind>=<claim UID>_<key>.
				if strings.HasSuffix(string(r.ResourceID), "_"+key) && string(r.Health) == want {
					return nil
				}
			}
		}
		return fmt.Errorf("allocatedResourcesStatus %+v", cs.AllocatedResourcesStatus)
	}, f.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
}
