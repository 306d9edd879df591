//go:build e2enode

package k8se2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cdi-exec/plugins/test/fixture"
	"github.com/cdi-exec/plugins/test/manifests"
)

// fixtureRun is a DRA deployment, rendered from the chart with helm, whose
// plugins read a fixture host instead of the node's /sys and /dev: the
// DaemonSet's host-sys and host-dev volumes point into the fixture's
// tree, which has real character nodes (made as root) with the numbers
// the fixture's sysfs gives. The CDI specs the plugins write carry those
// numbers, so the runtime makes the nodes in the containers though the
// node has no such devices: a container sees /dev/dri/card1 as 226:1, and
// could open it only where the device exists.
type fixtureRun struct {
	*draRun
	root  string            // the fixture host
	types map[string]string // type → plugin config (JSON); "": the chart's own
}

// fixtureRoot, in a config of newFixtureRun, stands for the fixture
// host's directory on the node.
const fixtureRoot = "@FIXTURE@"

// newFixtureRun starts a cluster and deploys the chart's DRA mode with
// types, each "<type>" → its plugin config (empty: the chart's own config
// of the type, turned on if the chart ships it off), on host, and waits until the
// driver serves and every type's slice lists want[type]. With kernel, the
// simulated kernel (fixture.StartKernel) runs on the host's sysfs as long
// as the test, making the VFs the driver's sriov writes ask for.
func newFixtureRun(t *testing.T, bound time.Duration, host fixture.Host, kernel bool, types map[string]string, want map[string][]string) (context.Context, *fixtureRun) {
	t.Helper()
	preflight(t, "helm")
	ctx, d := newDRARun(t, bound)
	f := &fixtureRun{draRun: d, root: filepath.Join(d.c.Dir, "fixture-host"), types: types}
	if err := buildFixture(f.root, host); err != nil {
		t.Fatal(err)
	}
	if kernel {
		k, err := fixture.StartKernel(f.root, host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			k.Stop()
			if r := k.Refused(); len(r) > 0 {
				t.Errorf("the simulated kernel refused writes: %v", r)
			}
		})
	}
	d.loadImage(ctx, t)
	d.apply(ctx, t, f.manifests(ctx, t))
	var last string
	for typ := range types {
		last = max(last, typ+".cdi-exec.io")
	}
	pod := d.waitDriverOf(ctx, t, "", last) // the drivers start in name order
	for typ, names := range want {
		f.waitDevices(ctx, t, typ, names)
	}
	t.Logf("driver pod %s serves %v on the fixture host", pod, want)
	return ctx, f
}

// buildFixture lays host out at root, with the /proc files the chart
// mounts for drm, as every kernel has them (/proc/driver, /proc/devices),
// where the fixture has none of its own (no NVIDIA GPUs).
func buildFixture(root string, host fixture.Host) error {
	if err := host.Build(root); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, "proc/driver"), 0o755); err != nil {
		return err
	}
	if devices := filepath.Join(root, "proc/devices"); !exists(devices) {
		return os.WriteFile(devices, []byte("Character devices:\n"), 0o644)
	}
	return nil
}

// reboot reboots the node (Node.Reboot) while the host changes to host,
// laid out afresh (with a new boot id) in place of the old tree, and the
// CDI spec dir, a tmpfs on a real node, is emptied.
func (f *fixtureRun) reboot(ctx context.Context, t *testing.T, host fixture.Host) {
	t.Helper()
	err := f.c.Reboot(ctx, func() error {
		next, old := f.root+".boot", f.root+".old"
		if err := buildFixture(next, host); err != nil {
			return err
		}
		if err := os.Rename(f.root, old); err != nil {
			return err
		}
		if err := os.Rename(next, f.root); err != nil {
			return err
		}
		if err := os.RemoveAll(old); err != nil {
			return err
		}
		_, err := emptyDir(f.c.CDIDir)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// manifests renders the chart with the fixture's types and the private
// directories, and points the host volumes at the fixture.
func (f *fixtureRun) manifests(ctx context.Context, t *testing.T) []runtime.Object {
	t.Helper()
	types := map[string]any{}
	for typ, conf := range f.types {
		// Every type given is on, whatever the chart's default.
		types[typ] = map[string]any{"enabled": true}
		if conf == "" {
			continue
		}
		var c map[string]any
		conf = strings.ReplaceAll(conf, fixtureRoot, f.root)
		if err := json.Unmarshal([]byte(conf), &c); err != nil {
			t.Fatalf("the %s config: %v", typ, err)
		}
		types[typ] = map[string]any{"config": c, "enabled": true}
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	values, err := json.Marshal(map[string]any{
		"types": types,
		"hostPaths": map[string]any{
			"stateDir": f.b.state, "claimStateDir": f.claims, "cdiSpecDir": f.c.CDIDir,
		},
		"dra": map[string]any{"podUID": false},
		// The test's node has only a loopback CNI: a pod on the pod
		// network gets no address the kubelet could probe.
		"hostNetwork": true,
		// A free port for the metrics and probes, which nothing on the
		// live node uses (on the host's network, 127.0.0.1 only).
		"metrics": map[string]any{"port": ports[0]},
	})
	if err != nil {
		t.Fatal(err)
	}
	valuesFile := filepath.Join(f.c.Dir, "fixture-values.json")
	if err := os.WriteFile(valuesFile, values, 0o644); err != nil {
		t.Fatal(err)
	}
	// The chart's default types are replaced, not merged: null drops them.
	args := []string{"template", "cdi", chart, "--namespace", draNamespace, "-f", valuesFile}
	for _, typ := range []string{"tty", "gpu"} {
		if _, ok := f.types[typ]; !ok {
			args = append(args, "--set", "types."+typ+"=null")
		}
	}
	out, err := run(ctx, nil, filepath.Join(tools(), "helm"), args...)
	if err != nil {
		t.Fatal(err)
	}
	rendered := filepath.Join(f.c.Dir, "fixture-manifests.yaml")
	if err := os.WriteFile(rendered, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Load(rendered)
	if err != nil {
		t.Fatal(err)
	}
	// The namespace is deploy/'s own (helm makes it with --create-namespace).
	var list []runtime.Object
	for _, o := range deployObjects(t, ".") {
		if ns, ok := o.Obj.(*corev1.Namespace); ok {
			list = append(list, ns)
		}
	}
	for _, o := range objs {
		if ds, ok := o.Obj.(*appsv1.DaemonSet); ok {
			f.pointAtFixture(t, ds)
		}
		list = append(list, o.Obj)
	}
	return list
}

// pointAtFixture makes the DaemonSet's volumes of the host's /sys, /dev
// and /proc (or of directories below them) the fixture's.
func (f *fixtureRun) pointAtFixture(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	moved := map[string]bool{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		for _, top := range []string{"/sys", "/dev", "/proc"} {
			if p := v.HostPath.Path; p == top || strings.HasPrefix(p, top+"/") {
				v.HostPath.Path = filepath.Join(f.root, p)
				moved[top] = true
			}
		}
	}
	if !moved["/sys"] || !moved["/dev"] {
		t.Fatalf("the DaemonSet has no host volume of /sys or /dev: %+v", ds.Spec.Template.Spec.Volumes)
	}
}

// waitDevices waits until the node's slices of the type's driver list
// exactly want (device names), and returns the devices.
func (f *fixtureRun) waitDevices(ctx context.Context, t *testing.T, typ string, want []string) []resourceapi.Device {
	t.Helper()
	driver := typ + ".cdi-exec.io"
	want = slices.Sorted(slices.Values(want))
	var devs []resourceapi.Device
	err := waitFor(ctx, "the "+driver+" slice", func(ctx context.Context) error {
		var l resourceapi.ResourceSliceList
		if err := f.c.Get(ctx, "/apis/resource.k8s.io/v1/resourceslices", &l); err != nil {
			return err
		}
		devs = nil
		var names []string
		for _, s := range l.Items {
			if s.Spec.Driver == driver && s.Spec.NodeName != nil && *s.Spec.NodeName == NodeName {
				for _, d := range s.Spec.Devices {
					devs = append(devs, d)
					names = append(names, d.Name)
				}
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, want) {
			return fmt.Errorf("the slices list %v, want %v", names, want)
		}
		return nil
	}, f.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	return devs
}

// nodeLoop prints the device nodes under the given /dev directories,
// with their numbers, every second.
func nodeLoop(dirs ...string) string {
	var globs []string
	for _, d := range dirs {
		globs = append(globs, d+"/*")
	}
	return fmt.Sprintf(`while :; do echo "nodes $(stat -c '%%n=%%t:%%T' %s 2>/dev/null | tr '\n' ' ')"; sleep 1; done`, strings.Join(globs, " "))
}

// podNodes runs a pod (restartPolicy Always: it comes back after a
// reboot) with the claim's devices, one container naming the
// whole claim, that prints the device nodes under dirs, and returns them
// with their numbers ("/dev/dri/card1=e2:1"), sorted, once it printed
// them.
func (f *fixtureRun) podNodes(ctx context.Context, t *testing.T, name, claim string, dirs ...string) []string {
	t.Helper()
	f.yaml(ctx, t, fmt.Sprintf(`---
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  restartPolicy: Always
  resourceClaims:
  - name: c
    resourceClaimName: %s
  containers:
  - name: c
    image: %s
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", %s]
    resources:
      claims: [{name: c}]
`, name, claim, Image, strconv.Quote(nodeLoop(dirs...))))
	if _, err := f.c.WaitPod(ctx, "default", name, Running); err != nil {
		t.Fatal(err)
	}
	line, err := f.c.WaitLogLine(ctx, name, "c", "nodes")
	seen := strings.Fields(strings.TrimPrefix(line, "nodes"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(seen)
	return seen
}

// allocated returns the devices allocated to a claim, by request, once
// the scheduler allocated it.
func (f *fixtureRun) allocated(ctx context.Context, t *testing.T, claim string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := waitFor(ctx, "the claim "+claim+" allocated", func(ctx context.Context) error {
		var c resourceapi.ResourceClaim
		if err := f.c.Get(ctx, "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/"+claim, &c); err != nil {
			return err
		}
		if c.Status.Allocation == nil {
			return fmt.Errorf("not allocated")
		}
		clear(out)
		for _, r := range c.Status.Allocation.Devices.Results {
			out[r.Request] = append(out[r.Request], r.Device)
		}
		return nil
	}, f.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// hostNode is the fixture host's device node at path (/dev/...) as a pod
// printing it with nodeLoop shows it: "/dev/kfd=1ff:0".
func (f *fixtureRun) hostNode(t *testing.T, path string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(f.root, path), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s=%x:%x", path, unix.Major(st.Rdev), unix.Minor(st.Rdev))
}
