package dra

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/cdi-exec/plugins/internal/kubelet/claimstate"
	"github.com/cdi-exec/plugins/internal/kubelet/modelock"
	"github.com/cdi-exec/plugins/test/fixture"
)

const (
	ttyDriver = "tty.cdi-exec.io"
	gpuDriver = "gpu.cdi-exec.io"
	ttyConf   = `{"cdiVersion": "0.0.2", "name": "TTYs", "type": "tty", "plugin": "generic-tty",
  "args": {"num_system_reserved": 12}}`
	gpuConf = `{"cdiVersion": "0.0.2", "name": "GPUs", "type": "gpu", "plugin": "drm"}`
)

// host has tty0..tty19 (with 12 reserved, tty13..tty19 are offered) and
// GPUs 0000:10..11:00.0 on NUMA nodes 0 and 1, below the root ports
// 0000:00:01.0 and 0000:80:01.0.
func host() fixture.Host {
	h := fixture.Host{TTYs: map[string]int{"tty": 20}}
	for i := range 2 {
		h.GPUs = append(h.GPUs, fixture.GPU{Addr: fmt.Sprintf("0000:%02x:00.0", 0x10+i), Vendor: "0x1002", Device: "0x73bf",
			NUMA: fixture.Int(i), Driver: "amdgpu", Card: i, Render: 128 + i, Control: -1,
			Bridges: []string{fmt.Sprintf("0000:%02x:01.0", 0x80*i)}})
	}
	return h
}

func ttyNode(t *testing.T) *node {
	return newNode(t, host(), map[string]string{"tty.d/tty.conf": ttyConf, "gpu.d/drm.conf": gpuConf})
}

// uid returns a claim UID, the shape the API server gives.
func uid(n int) string { return fmt.Sprintf("0b2c3d4e-0000-4000-8000-%012d", n) }

func ttys(from, to int, except ...string) []string {
	var out []string
	for i := from; i <= to; i++ {
		if name := fmt.Sprint("tty", i); !slices.Contains(except, name) {
			out = append(out, name)
		}
	}
	return out
}

// waitSlice waits until the driver's slices list the devices want, in
// order, and returns them.
func (n *node) waitSlice(driver string, want []string) []resourceapi.Device {
	n.t.Helper()
	var devs []resourceapi.Device
	n.eventually(driver+" slice with "+strings.Join(want, ","), func() error {
		devs = nil
		for _, s := range n.slices(driver) {
			if s.Spec.Pool.Name != nodeName || s.Spec.NodeName == nil || *s.Spec.NodeName != nodeName {
				return fmt.Errorf("%w: slice %s is in pool %q on node %v", errGiveUp, s.Name, s.Spec.Pool.Name, s.Spec.NodeName)
			}
			devs = append(devs, s.Spec.Devices...)
		}
		var names []string
		for _, d := range devs {
			names = append(names, d.Name)
		}
		if !slices.Equal(names, want) {
			return fmt.Errorf("devices %v", names)
		}
		return nil
	})
	return devs
}

func TestRegistration(t *testing.T) {
	n := ttyNode(t)
	in := n.start(n.options())
	if got := in.plugin.Drivers(); !slices.Equal(got, []string{gpuDriver, ttyDriver}) {
		t.Fatalf("drivers %v", got)
	}
	info, err := n.info(in.regSocket(ttyDriver))
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != "DRAPlugin" || info.Name != ttyDriver || info.Endpoint != filepath.Join(n.kubelet, "plugins", ttyDriver, "dra.sock") ||
		!slices.Contains(info.SupportedVersions, "v1.DRAPlugin") {
		t.Fatalf("GetInfo: %+v", info)
	}
	if err := in.shutdown(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, sock := range []string{in.regSocket(ttyDriver), info.Endpoint} {
		if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind: %v", sock, err)
		}
	}
}

// TestSlice checks the devices and attributes published, that a device
// held by a caller outside Kubernetes leaves the slice at the next poll,
// and a freed one comes back, and that an unplugged one stays, last,
// with a taint in the driver's domain whose value is the plugin's reason,
// until it is back.
func TestSlice(t *testing.T) {
	n := ttyNode(t)
	opt := n.options()
	opt.Poll = 20 * time.Millisecond
	n.start(opt)
	devs := n.waitSlice(ttyDriver, ttys(13, 19))
	if k := devs[0].Attributes[attrKey]; k.StringValue == nil || *k.StringValue != "tty13" {
		t.Fatalf("tty13's key attribute: %+v", k)
	}
	gpus := n.waitSlice(gpuDriver, []string{"pci-0000-10-00-0", "pci-0000-11-00-0"})
	want := map[resourceapi.QualifiedName]string{
		attrKey: "0000:11:00.0", attrPCIAddress: "0000:11:00.0", attrVendorID: "0x1002", attrDeviceID: "0x73bf", attrNUMA: "1",
		deviceattribute.StandardDeviceAttributePCIeRoot: "pci0000:80",
		deviceattribute.StandardDeviceAttributeNUMANode: "1", deviceattribute.StandardDeviceAttributePCIBusID: "0000:11:00.0",
	}
	got := map[resourceapi.QualifiedName]string{}
	for name, a := range gpus[1].Attributes {
		switch {
		case a.StringValue != nil:
			got[name] = *a.StringValue
		case a.IntValue != nil:
			got[name] = fmt.Sprint(*a.IntValue)
		default:
			got[name] = fmt.Sprintf("%+v", a)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("attributes of the second GPU: %v, want %v", got, want)
	}

	if err := n.run("generic-tty", ttyConf, "CDI_COMMAND=ADD", "CDI_VERSION=0.0.2", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=cdictl-pod"); err != nil {
		t.Fatal(err)
	}
	tty17, away := filepath.Join(n.root, "dev/tty17"), filepath.Join(n.root, "dev/.tty17-away")
	if err := os.Rename(tty17, away); err != nil {
		t.Fatal(err)
	}
	devs = n.waitSlice(ttyDriver, append(ttys(14, 19, "tty17"), "tty17"))
	want17 := []resourceapi.DeviceTaint{{Key: "tty.cdi-exec.io/unusable", Value: "no-dev-node-or-not-a-character-device", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	checkTaints(t, devs, map[string][]resourceapi.DeviceTaint{"tty17": want17})
	if err := n.run("generic-tty", ttyConf, "CDI_COMMAND=DEL", "CDI_VERSION=0.0.2", "CDI_REQUEST_ID=cdictl-pod"); err != nil {
		t.Fatal(err)
	}
	devs = n.waitSlice(ttyDriver, append(ttys(13, 19, "tty17"), "tty17"))
	checkTaints(t, devs, map[string][]resourceapi.DeviceTaint{"tty17": want17})
	if err := os.Rename(away, tty17); err != nil {
		t.Fatal(err)
	}
	checkTaints(t, n.waitSlice(ttyDriver, ttys(13, 19)), nil)
}

// checkTaints checks that exactly the devices of want have taints, and
// those, ignoring when they were added.
func checkTaints(t *testing.T, devs []resourceapi.Device, want map[string][]resourceapi.DeviceTaint) {
	t.Helper()
	for _, d := range devs {
		var got []resourceapi.DeviceTaint
		for _, tn := range d.Taints {
			if tn.TimeAdded == nil {
				t.Errorf("%s: taint %+v has no time", d.Name, tn)
			}
			tn.TimeAdded = nil
			got = append(got, tn)
		}
		if !slices.Equal(got, want[d.Name]) {
			t.Errorf("%s: taints %+v, want %+v", d.Name, got, want[d.Name])
		}
	}
}

// specNodes returns the device nodes a container gets when the runtime
// injects the CDI devices ids from the spec dir.
func (n *node) specNodes(ids []string) []string {
	n.t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(n.specDir), cdi.WithAutoRefresh(false))
	if err != nil {
		n.t.Fatal(err)
	}
	spec := &oci.Spec{Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(spec, ids...); err != nil {
		n.t.Fatalf("injecting %v: %v", ids, err)
	}
	var paths []string
	for _, d := range spec.Linux.Devices {
		paths = append(paths, d.Path)
	}
	slices.Sort(paths)
	return paths
}

// checkPrepared checks an answer of NodePrepareResources for a claim of
// the tty driver that holds keys: one device per key with its own CDI
// device <claim UID>_<key>, whose spec gives exactly that key's node, the
// claim's own CDI device giving all of them, which the plugin holds under
// the claim's UID, and a record of the claim.
func (n *node) checkPrepared(c *resourceapi.ResourceClaim, got *drapb.NodePrepareResourceResponse, keys ...string) {
	n.t.Helper()
	if got.Error != "" {
		n.t.Fatalf("prepare: %s", got.Error)
	}
	var names []string
	for _, d := range got.Devices {
		names = append(names, d.DeviceName)
		if d.PoolName != nodeName || !slices.Equal(d.RequestNames, []string{"r"}) ||
			!slices.Equal(d.CdiDeviceIds, []string{"cdi-exec.io/tty=" + string(c.UID) + "_" + d.DeviceName}) {
			n.t.Fatalf("prepared device %+v", d)
		}
		if got := n.specNodes(d.CdiDeviceIds); !slices.Equal(got, []string{"/dev/" + d.DeviceName}) {
			n.t.Fatalf("the CDI spec gives a container of %s %v", d.DeviceName, got)
		}
	}
	if !slices.Equal(names, keys) {
		n.t.Fatalf("prepared %v, want %v", names, keys)
	}
	var nodes []string
	for _, k := range keys {
		nodes = append(nodes, "/dev/"+k)
	}
	slices.Sort(nodes)
	if got := n.specNodes([]string{"cdi-exec.io/tty=" + string(c.UID)}); !slices.Equal(got, nodes) {
		n.t.Fatalf("the CDI spec gives the container %v, want %v", got, nodes)
	}
	held := n.holders("tty")
	for _, k := range keys {
		if held[k] != string(c.UID) {
			n.t.Fatalf("%s is held by %q, want the claim's UID", k, held[k])
		}
	}
	rec := n.records(ttyDriver)[string(c.UID)]
	if rec.Namespace != c.Namespace || rec.Name != c.Name || !rec.Prepared || !slices.Equal(rec.Keys, keys) {
		n.t.Fatalf("record %+v", rec)
	}
}

// records returns a driver's claim records.
func (n *node) records(driver string) claimstate.Claims {
	n.t.Helper()
	f, err := claimstate.Open(n.claimDir, driver)
	if err != nil {
		n.t.Fatal(err)
	}
	cs, err := f.Read(context.Background())
	if err != nil {
		n.t.Fatal(err)
	}
	return cs
}

// specFiles lists the spec dir.
func (n *node) specFiles() []string {
	files, _ := filepath.Glob(filepath.Join(n.specDir, "*.json"))
	return files
}

func TestPrepareUnprepare(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	c := n.claim("two-ttys", uid(1), ttyDriver, "tty16", "tty14")
	n.checkPrepared(c, n.prepare(ttyDriver, c), "tty16", "tty14")

	// The kubelet prepares again after a restart: the same answer.
	n.checkPrepared(c, n.prepare(ttyDriver, c), "tty16", "tty14")
	// The claim's devices stay in the slice; the scheduler counts them.
	n.waitSlice(ttyDriver, ttys(13, 19))

	for i := range 2 { // a retry is harmless
		if r := n.unprepare(ttyDriver, c); r.Error != "" {
			t.Fatalf("unprepare %d: %s", i, r.Error)
		}
		held := n.holders("tty")
		if held["tty14"] != "" || held["tty16"] != "" {
			t.Fatalf("unprepare %d: holders %v", i, held)
		}
		if f := n.specFiles(); len(f) != 0 {
			t.Fatalf("unprepare %d: spec files left: %v", i, f)
		}
		if r := n.records(ttyDriver); len(r) != 0 {
			t.Fatalf("unprepare %d: records left: %v", i, r)
		}
	}
}

// TestPrepareAfterSpecDirWiped: after a reboot /var/run/cdi is empty and
// the kubelet prepares its claims again; the replay writes the spec anew.
func TestPrepareAfterSpecDirWiped(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	c := n.claim("ttys", uid(2), ttyDriver, "tty13", "tty19")
	n.checkPrepared(c, n.prepare(ttyDriver, c), "tty13", "tty19")
	if err := os.RemoveAll(n.specDir); err != nil {
		t.Fatal(err)
	}
	n.checkPrepared(c, n.prepare(ttyDriver, c), "tty13", "tty19")
}

// TestPrepareFailures: a claim that cannot be prepared gets an error,
// holds nothing and leaves no record.
func TestPrepareFailures(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	if err := n.run("generic-tty", ttyConf, "CDI_COMMAND=ADD", "CDI_VERSION=0.0.2", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=cdictl-pod"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		devices []string
		want    string
	}{
		{"held by another caller", []string{"tty15", "tty13"}, "code 103"},
		{"reserved", []string{"tty15", "tty5"}, "code 103"},
		{"unknown", []string{"tty15", "tty42"}, "code 103"},
		{"not a device name", []string{"tty15", "TTY1"}, "device name"},
	}
	for i, tt := range tests {
		c := n.claim(fmt.Sprint("bad-", i), uid(100+i), ttyDriver, tt.devices...)
		r := n.prepare(ttyDriver, c)
		if !strings.Contains(r.Error, tt.want) {
			t.Errorf("%s: error %q, want %q in it", tt.name, r.Error, tt.want)
		}
		for k, h := range n.holders("tty") {
			if h == string(c.UID) {
				t.Errorf("%s: %s is held by the failed claim", tt.name, k)
			}
		}
		if r := n.records(ttyDriver); len(r) != 0 {
			t.Errorf("%s: records left: %v", tt.name, r)
		}
	}
}

// TestStaleClaims: prepared claims whose ResourceClaim was deleted, or
// re-created with a new UID, are freed once the grace period has passed;
// a claim still there, one the API server cannot be asked about, and
// devices held by other callers are left alone.
func TestStaleClaims(t *testing.T) {
	n := ttyNode(t)
	opt := n.options()
	in := n.start(opt)
	deleted := n.claim("deleted", uid(1), ttyDriver, "tty14")
	recreated := n.claim("recreated", uid(2), ttyDriver, "tty15")
	kept := n.claim("kept", uid(3), ttyDriver, "tty16")
	unknown := n.claim("unknown", uid(4), ttyDriver, "tty17")
	for _, c := range []*resourceapi.ResourceClaim{deleted, recreated, kept, unknown} {
		if r := n.prepare(ttyDriver, c); r.Error != "" {
			t.Fatalf("prepare %s: %s", c.Name, r.Error)
		}
	}
	// Others: a caller outside Kubernetes, and the device-plugin mode.
	others := map[string]string{"tty13": "cdictl-pod", "tty18": "k8s-dp-tty-0123456789abcdef0123456789abcdef"}
	for _, id := range []string{"cdictl-pod", others["tty18"]} {
		if err := n.run("generic-tty", ttyConf, "CDI_COMMAND=ADD", "CDI_VERSION=0.0.2", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID="+id); err != nil {
			t.Fatal(err)
		}
	}
	n.deleteClaim(deleted)
	n.deleteClaim(recreated)
	n.claim("recreated", uid(22), ttyDriver, "tty15")
	n.deleteClaim(unknown)
	n.client.PrependReactor("get", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "unknown" {
			return true, nil, errors.New("the API server is away")
		}
		return false, nil, nil
	})

	d := in.driver(ttyDriver)
	held := func() map[string]string {
		h := n.holders("tty")
		for k, v := range h {
			if v == "" {
				delete(h, k)
			}
		}
		return h
	}
	all := map[string]string{"tty14": uid(1), "tty15": uid(2), "tty16": uid(3), "tty17": uid(4)}
	maps.Copy(all, others)
	first := time.Now()
	for _, step := range []struct {
		after time.Duration // since the first scan
		want  map[string]string
	}{
		{0, all},
		{opt.StaleGrace - time.Second, all},
		{opt.StaleGrace, map[string]string{"tty16": uid(3), "tty17": uid(4), "tty13": others["tty13"], "tty18": others["tty18"]}},
	} {
		d.lifecycle.collect(t.Context(), first.Add(step.after))
		if got := held(); !maps.Equal(got, step.want) {
			t.Fatalf("%v after the first scan: held %v, want %v", step.after, got, step.want)
		}
	}
	if r := n.records(ttyDriver); len(r) != 2 || r[uid(3)].Name != "kept" || r[uid(4)].Name != "unknown" {
		t.Fatalf("records %v", r)
	}
	if f := n.specFiles(); len(f) != 2 {
		t.Fatalf("spec files %v, want those of kept and unknown", f)
	}
}

// TestStaleDeallocated: a prepared claim whose ResourceClaim is still
// there but no longer allocated a device of this driver on this node
// (deallocated and not deleted, allocated to another node's pool, or to
// another driver only) is freed once the grace period has passed; one
// still allocated here is left alone.
func TestStaleDeallocated(t *testing.T) {
	n := ttyNode(t)
	opt := n.options()
	in := n.start(opt)
	claims := map[string]*resourceapi.ResourceClaim{}
	for i, name := range []string{"deallocated", "moved", "other-driver", "still"} {
		claims[name] = n.claim(name, uid(40+i), ttyDriver, fmt.Sprint("tty", 14+i))
		if r := n.prepare(ttyDriver, claims[name]); r.Error != "" {
			t.Fatalf("prepare %s: %s", name, r.Error)
		}
	}
	change := func(name string, alloc *resourceapi.AllocationResult) {
		t.Helper()
		c := claims[name].DeepCopy()
		c.Status.Allocation = alloc
		if _, err := n.client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(t.Context(), c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	change("deallocated", nil)
	change("moved", &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "r", Driver: ttyDriver, Pool: "other-node", Device: "tty15"}}}})
	change("other-driver", &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "r", Driver: gpuDriver, Pool: nodeName, Device: "pci-0000-10-00-0"}}}})

	d := in.driver(ttyDriver)
	held := func() map[string]string {
		h := n.holders("tty")
		maps.DeleteFunc(h, func(_, v string) bool { return v == "" })
		return h
	}
	all := map[string]string{"tty14": uid(40), "tty15": uid(41), "tty16": uid(42), "tty17": uid(43)}
	first := time.Now()
	for _, step := range []struct {
		after time.Duration
		want  map[string]string
	}{
		{0, all},
		{opt.StaleGrace - time.Second, all},
		{opt.StaleGrace, map[string]string{"tty17": uid(43)}},
	} {
		d.lifecycle.collect(t.Context(), first.Add(step.after))
		if got := held(); !maps.Equal(got, step.want) {
			t.Fatalf("%v after the first scan: held %v, want %v", step.after, got, step.want)
		}
	}
	if r := n.records(ttyDriver); len(r) != 1 || r[uid(43)].Name != "still" {
		t.Fatalf("records %v", r)
	}
}

// TestRunRefusedWhileDevicePluginServes: a type the device-plugin mode
// serves on this node is not served by the DRA mode too.
func TestRunRefusedWhileDevicePluginServes(t *testing.T) {
	n := ttyNode(t)
	l, err := modelock.Acquire(t.Context(), n.state, modelock.DevicePlugin, []string{"tty"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	p, err := New(n.options())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(t.Context()); !errors.Is(err, modelock.ErrServed) {
		t.Fatalf("Run: %v, want ErrServed", err)
	}
	opt := n.options()
	opt.Types = []string{"gpu"}
	in := n.start(opt) // another type is fine
	in.shutdown()
}

// TestDriverNames: every type becomes a driver whose name the API
// accepts, or the plugin does not start.
func TestDriverNames(t *testing.T) {
	tests := []struct {
		typ, suffix string
		ok          bool
	}{
		{"tty", "cdi-exec.io", true},
		{"GPU", "cdi-exec.io", false},
		{"tty", strings.Repeat("a", 60) + ".io", false},
	}
	for _, tt := range tests {
		n := newNode(t, host(), map[string]string{tt.typ + ".d/tty.conf": strings.Replace(ttyConf, `"type": "tty"`, `"type": "`+tt.typ+`"`, 1)})
		opt := n.options()
		opt.Suffix = tt.suffix
		_, err := New(opt)
		if (err == nil) != tt.ok || err != nil && !strings.Contains(err.Error(), "driver name") {
			t.Errorf("type %q, suffix %q: New: %v", tt.typ, tt.suffix, err)
		}
	}
}

// TestSocketPathTooLong: a driver whose sockets the kernel could not bind
// does not start.
func TestSocketPathTooLong(t *testing.T) {
	n := ttyNode(t)
	opt := n.options()
	opt.Types = []string{"tty"}
	opt.Suffix = strings.Repeat("a", 40) + ".example.com"
	opt.PodUID = uid(9)
	p, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "more than a unix socket can have") {
		t.Fatalf("Run: %v", err)
	}
}

// TestRollingUpdate: two pods of the driver serve side by side; a claim
// prepared by the old one is still prepared, and unprepared, by the new
// one once the old one has gone.
func TestRollingUpdate(t *testing.T) {
	n := ttyNode(t)
	opt := n.options()
	opt.Types = []string{"tty"}
	opt.PodUID = "pod-old"
	old := n.start(opt)
	c := n.claim("ttys", uid(5), ttyDriver, "tty14", "tty15")
	n.checkPrepared(c, old.prepare(ttyDriver, c), "tty14", "tty15")

	opt.PodUID = "pod-new"
	next := n.start(opt)
	if err := old.shutdown(); err != nil {
		t.Fatalf("old pod: %v", err)
	}
	if _, err := n.info(next.regSocket(ttyDriver)); err != nil {
		t.Fatalf("the new pod's registration after the old one stopped: %v", err)
	}
	n.checkPrepared(c, next.prepare(ttyDriver, c), "tty14", "tty15")
	if r := next.unprepare(ttyDriver, c); r.Error != "" {
		t.Fatalf("unprepare by the new pod: %s", r.Error)
	}
	if h := n.holders("tty"); h["tty14"] != "" || h["tty15"] != "" {
		t.Fatalf("holders after unprepare %v", h)
	}
}
