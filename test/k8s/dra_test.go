//go:build e2enode

package k8se2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cdi-exec/plugins/internal/kubelet/devname"
	"github.com/cdi-exec/plugins/test/manifests"
)

// The names deploy/ gives things.
const (
	draNamespace = "cdi-exec"
	draDriver    = "tty.cdi-exec.io"
	draSelector  = "app.kubernetes.io%2Fcomponent%3Ddra"
)

// repoRoot is the repository, two levels above this package.
const repoRoot = "../.."

// TestClusterDRATTYs deploys the DRA mode as a cluster admin would: the
// image built from Containerfile and loaded into the node's containerd,
// and deploy/ applied with kubectl, changed only where a test must not
// touch the live node (the host directories of the plugins' stores, the
// claim records and the CDI specs, which become private ones), in the tty
// config (only virtual consoles well above any in use), and without
// rolling updates: the kubelet's private root is 21 characters longer
// than /var/lib/kubelet, and the registration socket it dials,
// <root>/plugins_registry/<driver>-<pod UID>-reg.sock, would be longer
// than a unix socket path can be. Then:
//  1. the DaemonSet's pod runs the driver, and a ResourceSlice of the
//     node's free ttys appears;
//  2. the example pod, with a claim from the template for two ttys, runs
//     and sees exactly the two ttys allocated to the claim, which the
//     plugin holds under the claim's UID and the CDI spec names;
//  3. force-deleting the driver's pod (the DaemonSet makes a new one)
//     and emptying the spec dir once its container is gone leaves the
//     running claim prepared and the pod's container untouched, and the
//     new pod puts the spec files back (docs/kubernetes.md#spec-files-put-back);
//     the pod's container, killed then, runs again within restartBound
//     with its ttys (without the files the runtime refuses it:
//     "unresolvable CDI devices"), and a spec file deleted by hand while
//     the driver runs is back within specFileBound;
//  4. deleting the pod unprepares the claim: the ttys are free again
//     (cdictl ls) and the spec file is gone.
func TestClusterDRATTYs(t *testing.T) {
	ctx, d := newDRARun(t, 10*time.Minute)
	c := d.c
	start := time.Now()
	d.loadImage(ctx, t)
	t.Logf("image built and imported in %.1fs", time.Since(start).Seconds())
	d.apply(ctx, t, d.driverManifests(t))

	start = time.Now()
	driverPod := d.waitDriver(ctx, t, "")
	slice := d.waitSlice(ctx, t)
	t.Logf("driver pod %s runs; its slice lists %v, %.1fs after kubectl apply", driverPod, slice, time.Since(start).Seconds())

	start = time.Now()
	d.apply(ctx, t, d.exampleManifests(t))
	pod, err := c.WaitPod(ctx, "default", "two-ttys", Running)
	if err != nil {
		t.Fatal(err)
	}
	held, uid := d.checkClaim(ctx, t, pod)
	t.Logf("the pod ran %.1fs after kubectl apply", time.Since(start).Seconds())

	start = time.Now()
	old, err := c.WaitPod(ctx, draNamespace, driverPod, Running)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "delete", "pod", "-n", draNamespace, driverPod, "--grace-period=0", "--force", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitTaskGone(ctx, old.Status.ContainerStatuses[0].ContainerID); err != nil {
		t.Fatal(err)
	}
	wiped, err := emptyDir(c.CDIDir)
	if err != nil {
		t.Fatal(err)
	}
	next := d.waitDriver(ctx, t, driverPod)
	d.waitLog(ctx, t, next, `"slice published" `)
	took := waitFiles(ctx, t, c.CDIDir, wiped, start, 2*time.Minute)
	d.stillPrepared(ctx, t, "the driver's restart", pod, held, uid)
	t.Logf("driver pod %s force-deleted and the spec dir emptied (%v): replaced by %s, the files back %.1fs after the deletion; the claim stays prepared",
		driverPod, wiped, next, took.Seconds())
	d.killAndRestart(ctx, t, pod, held, uid)
	deleteSpecFiles(ctx, t, c.CDIDir, wiped, c.Kubelet)

	start = time.Now()
	if _, err := c.Kubectl(ctx, "delete", "pod", "two-ttys", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	d.waitFreed(ctx, t, held)
	log := d.waitLog(ctx, t, next, `"unprepare" `)
	t.Logf("freed %v %.1fs after the pod was deleted", held, time.Since(start).Seconds())
	if e := errorLine.FindString(log); e != "" {
		t.Errorf("the driver logged an error, %q:\n%s", e, log)
	}
	if strings.Contains(log, "forbidden") {
		t.Errorf("the driver logged %q:\n%s", "forbidden", log)
	}
}

// stillPrepared checks that after event the claim pod still runs in the
// same container, and its claim holds the same devices under the same UID.
func (d *draRun) stillPrepared(ctx context.Context, t *testing.T, event string, pod Pod, held []string, uid string) {
	t.Helper()
	after, err := d.c.WaitPod(ctx, "default", pod.Metadata.Name, Running)
	if err != nil {
		t.Fatal(err)
	}
	sameContainer(t, event, pod, after)
	if again, againUID := d.checkClaim(ctx, t, after); !slices.Equal(again, held) || againUID != uid {
		t.Fatalf("after %s the claim %s holds %v, was %s with %v", event, againUID, again, uid, held)
	}
}

// killAndRestart kills the claim pod's container and checks that it runs
// again within restartBound, seeing the ttys its claim held, still held
// under the claim's UID.
func (d *draRun) killAndRestart(ctx context.Context, t *testing.T, pod Pod, held []string, uid string) {
	t.Helper()
	start := time.Now()
	if err := d.c.KillContainer(ctx, pod); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, restartBound)
	defer cancel()
	after, err := d.c.WaitPod(wctx, "default", pod.Metadata.Name, RestartedFrom(pod))
	if err != nil {
		t.Fatalf("the claim pod's container, killed, did not run again within %v: %v", restartBound, err)
	}
	took := time.Since(start)
	d.b.logLen = 0 // the new container's output
	if again, againUID := d.checkClaim(ctx, t, after); !slices.Equal(again, held) || againUID != uid {
		t.Fatalf("after its restart the claim %s holds %v, was %s with %v", againUID, again, uid, held)
	}
	t.Logf("the claim pod's container, killed, ran again %.1fs later (restarts %d) with %v", took.Seconds(), after.Status.ContainerStatuses[0].RestartCount, held)
}

// draRun is the DRA deployment on a cluster's node.
type draRun struct {
	c        *Cluster
	b        *pluginRun // cdictl ls, the spec files and the pod's output, as for the device-plugin mode
	claims   string     // the drivers' claim records: the host side of --state-dir
	reserved int
}

// newDRARun starts a cluster (after checking that this machine has the
// tools named, beyond the cluster's own) for a DRA deployment of the
// repository's binaries, and returns a context of the test's that ends
// after bound, and the deployment, nothing deployed yet.
func newDRARun(t *testing.T, bound time.Duration, tools ...string) (context.Context, *draRun) {
	t.Helper()
	bin := repoBin(t)
	reserved := ttyReserve(t)
	if len(tools) > 0 {
		preflight(t, tools...)
	}
	c := StartCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	t.Cleanup(cancel)
	d := &draRun{c: c, reserved: reserved, claims: filepath.Join(c.Dir, "dra-state"),
		b: &pluginRun{n: c.Node, bin: bin, conf: filepath.Join(c.Dir, "cdi-conf"), state: filepath.Join(c.Dir, "cdi-state")}}
	// The host's copy of the tty config is for cdictl.
	if err := os.MkdirAll(filepath.Join(d.b.conf, "tty.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.b.conf, "tty.d", "generic-tty.conf"), []byte(d.ttyConf()), 0o644); err != nil {
		t.Fatal(err)
	}
	return ctx, d
}

func (d *draRun) ttyConf() string {
	return fmt.Sprintf(`{"cdiVersion": "0.0.2", "name": "virtual consoles", "type": "tty", "plugin": "generic-tty", "args": {"num_system_reserved": %d}}`, d.reserved)
}

// loadImage builds the image with make image (a context of the binaries
// and their licenses, no network), with podman's storage in the node's
// directory, saves it as an OCI archive and imports it into the node's
// containerd.
func (d *draRun) loadImage(ctx context.Context, t *testing.T) {
	t.Helper()
	dir := filepath.Join(d.c.Dir, "dra-image")
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	image := d.daemonSet(t).Spec.Template.Spec.Containers[0].Image
	podman := []string{
		"--root", filepath.Join(dir, "storage"), "--runroot", filepath.Join(dir, "run"),
		"--tmpdir", filepath.Join(dir, "libpod"), "--storage-driver", "vfs",
		"--events-backend", "none", "--cgroup-manager", "cgroupfs",
	}
	archive := filepath.Join(dir, "plugins.oci.tar")
	tmp := []string{"TMPDIR=" + filepath.Join(dir, "tmp")}
	// make image stages the binaries and their licenses as the context.
	if _, err := run(ctx, tmp, "make", "--no-print-directory", "-C", repoRoot, "-o", "build", "image", "BIN="+d.b.bin,
		"IMAGE="+image, "PODMAN=podman", "PODMAN_FLAGS="+strings.Join(podman, " ")); err != nil {
		t.Fatal(err)
	}
	if _, err := run(ctx, tmp, "podman", append(podman, "save", "--format", "oci-archive", "--output", archive, image)...); err != nil {
		t.Fatal(err)
	}
	if err := d.c.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
}

// deployObjects reads the manifests of deploy/dir.
func deployObjects(t *testing.T, dir string) []manifests.Object {
	t.Helper()
	files, err := manifests.Files(filepath.Join(repoRoot, "deploy", dir))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Load(files...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func (d *draRun) daemonSet(t *testing.T) *appsv1.DaemonSet {
	for _, o := range deployObjects(t, ".") {
		if ds, ok := o.Obj.(*appsv1.DaemonSet); ok {
			return ds
		}
	}
	t.Fatal("deploy/ has no DaemonSet")
	return nil
}

// driverManifests are deploy/'s objects, with the host directories of the
// plugins' stores, the claim records and the CDI specs made private, and
// the tty config's reserve raised.
func (d *draRun) driverManifests(t *testing.T) []runtime.Object {
	t.Helper()
	private := map[string]string{
		"/var/lib/cdi": d.b.state, "/var/lib/cdi-kubelet-plugin": d.claims, "/var/run/cdi": d.c.CDIDir,
	}
	var out []runtime.Object
	for _, o := range deployObjects(t, ".") {
		switch obj := o.Obj.(type) {
		case *appsv1.DaemonSet:
			for _, v := range obj.Spec.Template.Spec.Volumes {
				if v.HostPath != nil && private[v.HostPath.Path] != "" {
					v.HostPath.Path = private[v.HostPath.Path]
				}
			}
			noRollingUpdate(t, obj)
			hostNetwork(obj)
			privateMetricsPort(t, obj)
		case *corev1.ConfigMap:
			if _, ok := obj.Data["tty.conf"]; !ok {
				t.Fatalf("the ConfigMap has no tty.conf: %v", obj.Data)
			}
			obj.Data["tty.conf"] = d.ttyConf()
		}
		out = append(out, o.Obj)
	}
	return out
}

// hostNetwork puts the DaemonSet's pods on the host's network, as the
// example pods are: the test's node has only a loopback CNI, so a pod
// on the pod network gets no address the kubelet could probe.
func hostNetwork(ds *appsv1.DaemonSet) {
	ds.Spec.Template.Spec.HostNetwork = true
	ds.Spec.Template.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
}

// privateMetricsPort moves the DaemonSet's metrics and probes (a host
// port once the pods use the host's network) from the port of deploy/ to
// a free one, which nothing on the live node uses.
func privateMetricsPort(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	c := &ds.Spec.Template.Spec.Containers[0]
	i := slices.IndexFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--metrics-address=") })
	if i < 0 || len(c.Ports) != 1 {
		t.Fatalf("the DaemonSet's args %q and ports %+v have no metrics address", c.Args, c.Ports)
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	c.Args[i] = fmt.Sprintf("--metrics-address=:%d", ports[0])
	c.Ports[0].ContainerPort = int32(ports[0])
}

// noRollingUpdate drops --pod-uid and, as docs/kubernetes.md says for
// drivers without it, the surge of the DaemonSet's updates.
func noRollingUpdate(t *testing.T, ds *appsv1.DaemonSet) {
	c := &ds.Spec.Template.Spec.Containers[0]
	i := slices.Index(c.Args, "--pod-uid=$(POD_UID)")
	if i < 0 {
		t.Fatalf("the DaemonSet's args %q have no --pod-uid", c.Args)
	}
	c.Args = slices.Delete(c.Args, i, i+1)
	ds.Spec.UpdateStrategy.RollingUpdate = nil
}

// exampleManifests are deploy/example/two-ttys.yaml, with the node's one
// image and the host's network (there is no CNI).
func (d *draRun) exampleManifests(t *testing.T) []runtime.Object {
	t.Helper()
	var out []runtime.Object
	for _, o := range deployObjects(t, "example") {
		if filepath.Base(o.File) != "two-ttys.yaml" {
			continue
		}
		if pod, ok := o.Obj.(*corev1.Pod); ok {
			pod.Spec.HostNetwork = true
			pod.Spec.TerminationGracePeriodSeconds = new(int64)
			// A killed container is started again, as most pods' are.
			pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
			ctr := &pod.Spec.Containers[0]
			ctr.Image, ctr.ImagePullPolicy = Image, corev1.PullNever
			ctr.Command = []string{"/bin/sh", "-c", devLoop}
		}
		out = append(out, o.Obj)
	}
	return out
}

// apply writes the objects as a JSON list and runs kubectl apply on it.
func (d *draRun) apply(ctx context.Context, t *testing.T, objs []runtime.Object) {
	t.Helper()
	list := corev1.List{TypeMeta: metaList}
	for _, o := range objs {
		list.Items = append(list.Items, runtime.RawExtension{Object: o})
	}
	data, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(d.c.Dir, fmt.Sprintf("apply-%d.json", time.Now().UnixNano()))
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := d.c.Kubectl(ctx, "apply", "-f", f)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply:\n%s", strings.TrimSpace(out))
}

var metaList = metav1.TypeMeta{APIVersion: "v1", Kind: "List"}

// waitDriver waits until one pod of the DaemonSet other than old runs
// the driver on the node, and returns its name.
func (d *draRun) waitDriver(ctx context.Context, t *testing.T, old string) string {
	t.Helper()
	return d.waitDriverOf(ctx, t, old, draDriver)
}

// waitDriverOf is waitDriver for a deployment that serves driver (and
// maybe not the tty driver).
func (d *draRun) waitDriverOf(ctx context.Context, t *testing.T, old, driver string) string {
	t.Helper()
	var name string
	err := waitFor(ctx, "the DaemonSet's pod to run the driver", func(ctx context.Context) error {
		var l corev1.PodList
		if err := d.c.Get(ctx, "/api/v1/namespaces/"+draNamespace+"/pods?labelSelector="+draSelector, &l); err != nil {
			return err
		}
		var running []string
		for _, p := range l.Items {
			if p.Name == old || p.DeletionTimestamp != nil || p.Spec.NodeName != NodeName {
				continue
			}
			if len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil {
				running = append(running, p.Name)
			}
		}
		if len(running) != 1 {
			return fmt.Errorf("running driver pods %v of %d", running, len(l.Items))
		}
		name = running[0]
		return nil
	}, d.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	d.waitLog(ctx, t, name, `"serving" driver="`+driver+`"`)
	return name
}

// errorLine finds a line the driver logged at error severity, in klog's
// text format (--logging-format=text, the default), which the driver's
// log has: "E1126 06:09:28.123456 ..." followed by the quoted message and
// its key="value" pairs.
var errorLine = regexp.MustCompile(`(?m)^E\d{4} .*$`)

// waitLog waits until the driver pod's log has text, and returns the log.
// It reads the log from the kubelet's API (kubectl logs would need the
// node's name to resolve).
func (d *draRun) waitLog(ctx context.Context, t *testing.T, pod, text string) string {
	t.Helper()
	var out string
	err := waitFor(ctx, fmt.Sprintf("%q in the log of %s", text, pod), func(ctx context.Context) error {
		b, err := d.c.api.get(ctx, d.c.url("/containerLogs/"+draNamespace+"/"+pod+"/driver"))
		if err != nil {
			return err
		}
		out = string(b)
		if !strings.Contains(out, text) {
			return fmt.Errorf("not in %d bytes of log", len(out))
		}
		return nil
	}, d.c.Kubelet)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// freeTTYs lists the ttys the driver should offer: those above the
// reserve that the host has in sysfs and /dev.
func (d *draRun) freeTTYs() []string {
	var out []string
	entries, _ := os.ReadDir("/sys/class/tty")
	for _, e := range entries {
		if n, ok := ttyNumber(e.Name()); ok && n > d.reserved {
			if _, err := os.Stat("/dev/" + e.Name()); err == nil {
				out = append(out, e.Name())
			}
		}
	}
	slices.Sort(out)
	return out
}

// waitSlice waits until the node's ResourceSlices of the tty driver list
// exactly the free ttys, and returns them.
func (d *draRun) waitSlice(ctx context.Context, t *testing.T) []string {
	t.Helper()
	return d.waitSliceOf(ctx, t, d.freeTTYs())
}

// waitSliceOf waits until the node's ResourceSlices of the tty driver list
// exactly want, sorted, and returns them.
func (d *draRun) waitSliceOf(ctx context.Context, t *testing.T, want []string) []string {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	var names []string
	err := waitFor(ctx, "the driver's ResourceSlice", func(ctx context.Context) error {
		var l resourceapi.ResourceSliceList
		if err := d.c.Get(ctx, "/apis/resource.k8s.io/v1/resourceslices", &l); err != nil {
			return err
		}
		names = nil
		for _, s := range l.Items {
			if s.Spec.Driver == draDriver && s.Spec.NodeName != nil && *s.Spec.NodeName == NodeName {
				for _, dev := range s.Spec.Devices {
					names = append(names, dev.Name)
				}
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, want) {
			return fmt.Errorf("the slices list %v, want %v", names, want)
		}
		return nil
	}, d.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// checkClaim checks that the pod sees exactly two ttys, with the host's
// device numbers, and that they are the devices the scheduler allocated to
// the pod's claim, the ones the plugin holds under the claim's UID, and
// the ones the claim's CDI spec names. It returns them and the UID.
func (d *draRun) checkClaim(ctx context.Context, t *testing.T, pod Pod) ([]string, string) {
	t.Helper()
	seen, line := d.b.podTTYs(ctx, t, pod)
	claim := d.podClaim(ctx, t, pod.Metadata.Name)
	var allocated []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != draDriver || r.Pool != NodeName {
			t.Fatalf("the claim was allocated %+v", r)
		}
		key, err := devname.Key(r.Device)
		if err != nil {
			t.Fatal(err)
		}
		allocated = append(allocated, "/dev/"+key)
	}
	slices.Sort(allocated)
	if len(seen) != 2 || !slices.Equal(seen, allocated) {
		t.Fatalf("the pod sees %v, the claim was allocated %v", seen, allocated)
	}
	allocs := d.b.allocations(ctx, t)
	if len(allocs) != 1 || allocs[0].RequestID != string(claim.UID) || !slices.Equal(slices.Sorted(slices.Values(allocs[0].Devices)), seen) {
		t.Fatalf("the plugin holds %+v; want %v under the claim's UID %s", allocs, seen, claim.UID)
	}
	specs := d.b.specs(t)
	for f, nodes := range specs {
		if len(specs) != 1 || !strings.Contains(f, string(claim.UID)) || !slices.Equal(nodes, seen) {
			t.Fatalf("CDI specs %v, want one for %s naming %v", specs, claim.UID, seen)
		}
	}
	t.Logf("the pod sees %s; claim %s/%s (%s) was allocated %v", line, claim.Namespace, claim.Name, claim.UID, allocated)
	return seen, string(claim.UID)
}

// podClaim returns the ResourceClaim the resourceclaim controller made
// for the pod from the template.
func (d *draRun) podClaim(ctx context.Context, t *testing.T, pod string) *resourceapi.ResourceClaim {
	t.Helper()
	var p corev1.Pod
	if err := d.c.Get(ctx, "/api/v1/namespaces/default/pods/"+pod, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("the pod's claims: %+v", p.Status.ResourceClaimStatuses)
	}
	var claim resourceapi.ResourceClaim
	if err := d.c.Get(ctx, "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/"+*p.Status.ResourceClaimStatuses[0].ResourceClaimName, &claim); err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil {
		t.Fatalf("claim %s is not allocated", claim.Name)
	}
	return &claim
}

// waitFreed waits until the plugin holds nothing and the spec file is
// gone: the kubelet unprepares the claim once the pod is gone.
func (d *draRun) waitFreed(ctx context.Context, t *testing.T, held []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err := waitFor(ctx, fmt.Sprintf("the driver to free %v", held), func(ctx context.Context) error {
		if l := d.b.allocations(ctx, t); len(l) > 0 {
			return fmt.Errorf("still held: %+v", l)
		}
		if specs := d.b.specs(t); len(specs) > 0 {
			return fmt.Errorf("spec files left: %v", specs)
		}
		return nil
	}, d.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
}

// pluginDir gives the DaemonSet the directory of one more driver under
// the kubelet's plugins/, as the chart mounts each enabled type's own.
func pluginDir(ds *appsv1.DaemonSet, driver string) {
	path := kubeletDir + "/plugins/" + driver
	name := "plugin-" + strings.TrimSuffix(driver, ".cdi-exec.io")
	create := corev1.HostPathDirectoryOrCreate
	ds.Spec.Template.Spec.Volumes = append(ds.Spec.Template.Spec.Volumes, corev1.Volume{Name: name,
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &create}}})
	c := &ds.Spec.Template.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path})
}
