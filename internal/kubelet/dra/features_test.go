package dra

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// allocatedClaim creates a ResourceClaim with the given results, all from
// this node's pool, and opaque configs.
func (n *node) allocatedClaim(name, uid string, results []resourceapi.DeviceRequestAllocationResult, configs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
	n.t.Helper()
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, r := range results {
		r.Pool = nodeName
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	c.Status.Allocation.Devices.Config = configs
	c, err := n.client.ResourceV1().ResourceClaims("default").Create(context.Background(), c, metav1.CreateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return c
}

// cdiOf returns the CDI ids a prepare answer gives a request.
func cdiOf(t *testing.T, devs []*drapb.Device, request string) []string {
	t.Helper()
	var out []string
	for _, d := range devs {
		if slices.Contains(d.RequestNames, request) {
			out = append(out, d.CdiDeviceIds...)
		}
	}
	return out
}

// TestPerRequest: a claim with requests r1 and r2 is one pinned ADD under
// its UID, and each request's devices have CDI ids that give exactly their
// nodes.
func TestPerRequest(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	c := n.allocatedClaim("two-requests", uid(20), []resourceapi.DeviceRequestAllocationResult{
		{Request: "r1", Driver: ttyDriver, Device: "tty14"},
		{Request: "r2", Driver: ttyDriver, Device: "tty15"},
		{Request: "r2", Driver: ttyDriver, Device: "tty16"},
	})
	got := n.prepare(ttyDriver, c)
	if got.Error != "" {
		t.Fatal(got.Error)
	}
	if nodes := n.specNodes(cdiOf(t, got.Devices, "r1")); !slices.Equal(nodes, []string{"/dev/tty14"}) {
		t.Fatalf("r1 gets %v", nodes)
	}
	if nodes := n.specNodes(cdiOf(t, got.Devices, "r2")); !slices.Equal(nodes, []string{"/dev/tty15", "/dev/tty16"}) {
		t.Fatalf("r2 gets %v", nodes)
	}
	held := n.holders("tty")
	for _, k := range []string{"tty14", "tty15", "tty16"} {
		if held[k] != string(c.UID) {
			t.Fatalf("%s is held by %q, want %s", k, held[k], c.UID)
		}
	}
	if files := n.specFiles(); len(files) != 1 {
		t.Fatalf("spec files %v, want the one ADD's", files)
	}
	if r := n.unprepare(ttyDriver, c); r.Error != "" {
		t.Fatal(r.Error)
	}
}

// TestAdminAccess: a claim allocated a held device with admin access gets
// its nodes through a spec the driver writes; nothing is added to the
// plugins' stores, the holder keeps it, and unpreparing removes only the
// driver's spec.
func TestAdminAccess(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	holder := n.claim("holder", uid(21), ttyDriver, "tty17")
	n.checkPrepared(holder, n.prepare(ttyDriver, holder), "tty17")
	before := n.specFiles()
	beforeData, err := os.ReadFile(before[0])
	if err != nil {
		t.Fatal(err)
	}

	yes := true
	admin := n.allocatedClaim("monitor", uid(22), []resourceapi.DeviceRequestAllocationResult{
		{Request: "watch", Driver: ttyDriver, Device: "tty17", AdminAccess: &yes},
	})
	for range 2 { // the kubelet prepares again after a restart
		got := n.prepare(ttyDriver, admin)
		if got.Error != "" {
			t.Fatal(got.Error)
		}
		if nodes := n.specNodes(cdiOf(t, got.Devices, "watch")); !slices.Equal(nodes, []string{"/dev/tty17"}) {
			t.Fatalf("the admin claim gets %v", nodes)
		}
	}
	if h := n.holders("tty"); h["tty17"] != string(holder.UID) {
		t.Fatalf("tty17 is held by %q, want the holder", h["tty17"])
	}
	files := n.specFiles()
	if len(files) != 2 {
		t.Fatalf("spec files %v, want the holder's and the driver's", files)
	}
	if r := n.records(ttyDriver)[string(admin.UID)]; !r.Prepared || len(r.Keys) != 0 || !slices.Equal(r.AdminKeys, []string{"tty17"}) {
		t.Fatalf("the admin claim's record %+v", r)
	}
	for range 2 {
		if r := n.unprepare(ttyDriver, admin); r.Error != "" {
			t.Fatal(r.Error)
		}
	}
	if files := n.specFiles(); !slices.Equal(files, before) {
		t.Fatalf("after unprepare the spec files are %v, want %v", files, before)
	}
	if data, _ := os.ReadFile(before[0]); string(data) != string(beforeData) {
		t.Fatalf("the holder's spec changed:\n%s", data)
	}
	if h := n.holders("tty"); h["tty17"] != string(holder.UID) {
		t.Fatalf("after the admin claim went, tty17 is held by %q", h["tty17"])
	}
	if _, ok := n.records(ttyDriver)[string(admin.UID)]; ok {
		t.Fatal("the admin claim's record stayed")
	}
}

func opaqueConfig(driver, params string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{Source: resourceapi.AllocationConfigSourceClaim, DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}},
	}}
}

// TestDeviceConfig: drm's want_device_nodes per claim hands out only the
// render node; a field no plugin of the type takes per claim fails the
// prepare, naming it, and holds nothing.
func TestDeviceConfig(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	gpu := []resourceapi.DeviceRequestAllocationResult{{Request: "g", Driver: gpuDriver, Device: "pci-0000-10-00-0"}}
	c := n.allocatedClaim("render", uid(23), gpu,
		opaqueConfig(gpuDriver, `{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "want_device_nodes": ["render"]}`))
	got := n.prepare(gpuDriver, c)
	if got.Error != "" {
		t.Fatal(got.Error)
	}
	nodes := n.specNodes(cdiOf(t, got.Devices, "g"))
	if len(nodes) == 0 || slices.ContainsFunc(nodes, func(p string) bool { return !strings.HasPrefix(p, "/dev/dri/renderD") }) {
		t.Fatalf("a claim for [render] gets %v", nodes)
	}
	if r := n.unprepare(gpuDriver, c); r.Error != "" {
		t.Fatal(r.Error)
	}
	all := n.allocatedClaim("all", uid(24), gpu)
	if got := n.prepare(gpuDriver, all); got.Error != "" || len(n.specNodes(cdiOf(t, got.Devices, "g"))) <= len(nodes) {
		t.Fatalf("without a config the claim gets %v (%s)", n.specNodes(cdiOf(t, got.Devices, "g")), got.Error)
	}
	if r := n.unprepare(gpuDriver, all); r.Error != "" {
		t.Fatal(r.Error)
	}

	bad := n.allocatedClaim("bad", uid(25), []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: ttyDriver, Device: "tty18"}},
		opaqueConfig(ttyDriver, `{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "num_system_reserved": 0}`))
	if got := n.prepare(ttyDriver, bad); !strings.Contains(got.Error, `"num_system_reserved"`) {
		t.Fatalf("prepare with a field not per claim: %q", got.Error)
	}
	if h := n.holders("tty"); h["tty18"] != "" {
		t.Fatalf("the failed prepare left tty18 held by %q", h["tty18"])
	}
	if r := n.records(ttyDriver); len(r) != 0 {
		t.Fatalf("the failed prepare left records %v", r)
	}
}

// TestHealth: the kubelet's health stream (NodeWatchResources) reports
// every device of the slice Healthy, a device whose node went Unhealthy
// with the plugin's reason at the next poll, and Healthy once it is back.
func TestHealth(t *testing.T) {
	n := ttyNode(t)
	opt := n.options()
	opt.Poll = 50 * time.Millisecond
	opt.Types = []string{"tty"}
	in := n.start(opt)
	n.waitSlice(ttyDriver, ttys(13, 19))
	info, err := n.info(in.regSocket(ttyDriver))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stream, err := drahealth.NewDRAResourceHealthClient(n.conn(info.Endpoint)).NodeWatchResources(ctx, &drahealth.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// wait receives until tty17 has the health wanted.
	wait := func(want drahealth.HealthStatus) *drahealth.DeviceHealth {
		t.Helper()
		for {
			r, err := stream.Recv()
			if err != nil {
				t.Fatalf("waiting for tty17 %v: %v", want, err)
			}
			var tty17 *drahealth.DeviceHealth
			for _, d := range r.Devices {
				if d.Device.PoolName != nodeName {
					t.Fatalf("device %+v from another pool", d)
				}
				if d.Device.DeviceName == "tty17" {
					tty17 = d
				} else if d.Health != drahealth.HealthStatus_HEALTHY {
					t.Fatalf("%s is %v", d.Device.DeviceName, d.Health)
				}
			}
			if len(r.Devices) != 7 || tty17 == nil {
				t.Fatalf("report of %d devices: %+v", len(r.Devices), r.Devices)
			}
			if tty17.Health == want {
				return tty17
			}
		}
	}
	wait(drahealth.HealthStatus_HEALTHY)
	tty17, away := filepath.Join(n.root, "dev/tty17"), filepath.Join(n.root, "dev/.tty17-away")
	if err := os.Rename(tty17, away); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sick := wait(drahealth.HealthStatus_UNHEALTHY)
	if !strings.Contains(sick.Message, "no /dev node") {
		t.Fatalf("unhealthy tty17: %+v", sick)
	}
	t.Logf("Unhealthy %v after the node went: %q", time.Since(start).Round(time.Millisecond), sick.Message)
	if err := os.Rename(away, tty17); err != nil {
		t.Fatal(err)
	}
	wait(drahealth.HealthStatus_HEALTHY)
}

// TestTaintEffect: --taint-effect NoExecute gives the taint that effect.
func TestTaintEffect(t *testing.T) {
	n := ttyNode(t)
	opt := n.options()
	opt.Poll = 20 * time.Millisecond
	opt.Types = []string{"tty"}
	opt.TaintEffect = resourceapi.DeviceTaintEffectNoExecute
	n.start(opt)
	n.waitSlice(ttyDriver, ttys(13, 19))
	tty19, away := filepath.Join(n.root, "dev/tty19"), filepath.Join(n.root, "dev/.tty19-away")
	if err := os.Rename(tty19, away); err != nil {
		t.Fatal(err)
	}
	defer os.Rename(away, tty19)
	n.eventually("tty19 tainted NoExecute", func() error {
		for _, s := range n.slices(ttyDriver) {
			for _, d := range s.Spec.Devices {
				if d.Name == "tty19" && (len(d.Taints) != 1 || d.Taints[0].Effect != resourceapi.DeviceTaintEffectNoExecute) {
					return fmt.Errorf("tty19's taints %+v", d.Taints)
				}
			}
		}
		return nil
	})
}

func TestTaintValue(t *testing.T) {
	for reason, want := range map[string]string{
		"no /dev node (or not a character device)": "no-dev-node-or-not-a-character-device",
		"the plugin no longer reports the device":  "the-plugin-no-longer-reports-the-device",
		"/dev/ttyS3: ÉCHEC":                        "dev-ttyS3-CHEC",
		"":                                         "unusable",
		strings.Repeat("a", 62) + " b":             strings.Repeat("a", 62),
	} {
		if got := TaintValue(reason); got != want {
			t.Errorf("TaintValue(%q) = %q, want %q", reason, got, want)
		}
	}
}

var _ kubeletplugin.DRAPlugin = (*driver)(nil)

// TestDeviceConfigLimit: the node's config is the upper limit of a claim's
// DeviceConfig. With the node's drm config at want_device_nodes
// ["render"], a claim's ["primary", "render"] fails the prepare naming the
// field and holds nothing, and a claim's null gets the node's render nodes
// only, not the plugin's default (which adds the KMS node).
func TestDeviceConfigLimit(t *testing.T) {
	n := newNode(t, host(), map[string]string{"tty.d/tty.conf": ttyConf,
		"gpu.d/drm.conf": `{"cdiVersion": "0.0.2", "name": "GPUs", "type": "gpu", "plugin": "drm", "args": {"want_device_nodes": ["render"]}}`})
	n.start(n.options())
	gpu := []resourceapi.DeviceRequestAllocationResult{{Request: "g", Driver: gpuDriver, Device: "pci-0000-10-00-0"}}
	wider := n.allocatedClaim("wider", uid(26), gpu,
		opaqueConfig(gpuDriver, `{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "want_device_nodes": ["primary", "render"]}`))
	if got := n.prepare(gpuDriver, wider); !strings.Contains(got.Error, `field "want_device_nodes"`) {
		t.Fatalf("prepare beyond the node's config: %q, %v", got.Error, got.Devices)
	}
	for dev, by := range n.holders("gpu") {
		if by != "" {
			t.Fatalf("the failed prepare left %s held by %q", dev, by)
		}
	}
	if r := n.records(gpuDriver); len(r) != 0 {
		t.Fatalf("the failed prepare left records %v", r)
	}
	for i, params := range []string{
		`{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "want_device_nodes": null}`,
		`{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig"}`,
	} {
		c := n.allocatedClaim(fmt.Sprint("node-s-", i), uid(27+i), gpu, opaqueConfig(gpuDriver, params))
		got := n.prepare(gpuDriver, c)
		if got.Error != "" {
			t.Fatalf("%s: %s", params, got.Error)
		}
		nodes := n.specNodes(cdiOf(t, got.Devices, "g"))
		if len(nodes) == 0 || slices.ContainsFunc(nodes, func(p string) bool { return !strings.HasPrefix(p, "/dev/dri/renderD") }) {
			t.Fatalf("%s: the claim gets %v, want the node's render nodes only", params, nodes)
		}
		if r := n.unprepare(gpuDriver, c); r.Error != "" {
			t.Fatal(r.Error)
		}
	}
}

// TestCraftedUID: a claim UID with "/" or ".." (only a caller with the
// kubelet's socket can send one) fails prepare and unprepare with an error
// naming it, and never reaches a path: the file where the driver's own
// spec of such a UID would be, outside the CDI spec directory, stays, and
// the plugins hold nothing.
func TestCraftedUID(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	const crafted = "/../../victim/pwn"
	sum := sha256.Sum256([]byte(ttyDriver))
	victim := filepath.Join(filepath.Dir(n.specDir), "victim", "pwn_cdi-kubelet-plugin-"+hex.EncodeToString(sum[:8])+".json")
	if err := os.MkdirAll(filepath.Dir(victim), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(victim, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{crafted, "../pwn", "a/b", ".."} {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "crafted", UID: types.UID(uid)}}
		if r := n.unprepare(ttyDriver, c); !strings.Contains(r.Error, "claim UID") {
			t.Errorf("unprepare of UID %q: %q, want an error naming the claim UID", uid, r.Error)
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("unprepare of UID %q removed a file outside the spec directory: %v", crafted, err)
	}
	c := n.allocatedClaim("crafted", crafted, []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: ttyDriver, Device: "tty18"}})
	if got := n.prepare(ttyDriver, c); !strings.Contains(got.Error, "claim UID") {
		t.Errorf("prepare of UID %q: %q, want an error naming the claim UID", crafted, got.Error)
	}
	if h := n.holders("tty"); h["tty18"] != "" {
		t.Errorf("tty18 is held by %q", h["tty18"])
	}
	if r := n.records(ttyDriver); len(r) != 0 {
		t.Errorf("records %v", r)
	}
}

// TestAdminAccessUntrustedHook: the spec the driver writes for an
// admin-access claim carries the config's container_edits, so it refuses,
// as the plugins do, a hook whose program anyone but root could replace:
// the prepare fails, naming the config and the reason, and no spec is
// written for the admin claim.
func TestAdminAccessUntrustedHook(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the fixture's hook program must belong to root")
	}
	h := host()
	h.Files = []string{"usr/bin/hook"}
	n := newNode(t, h, map[string]string{"tty.d/tty.conf": ttyConf, "gpu.d/drm.conf": gpuConf})
	conf := `{"cdiVersion": "0.0.2", "name": "TTYs", "type": "tty", "plugin": "generic-tty", "args": {"num_system_reserved": 12,
  "cdi_spec": {"kind": "cdi-exec.io/tty", "dir": "` + n.specDir + `", "container_edits": {"hooks": [{"hookName": "createContainer", "path": "/usr/bin/hook"}]}}}}`
	if err := os.WriteFile(filepath.Join(n.conf, "tty.d/tty.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	hook := filepath.Join(n.root, "usr/bin/hook")
	if err := os.Chmod(hook, 0o755); err != nil {
		t.Fatal(err)
	}
	opt := n.options()
	opt.HostRoot = n.root
	n.start(opt)
	holder := n.claim("holder", uid(21), ttyDriver, "tty17")
	n.checkPrepared(holder, n.prepare(ttyDriver, holder), "tty17")
	before := n.specFiles()

	// Someone makes the program writable by all after the driver listed
	// the devices.
	if err := os.Chmod(hook, 0o777); err != nil {
		t.Fatal(err)
	}
	yes := true
	admin := n.allocatedClaim("monitor", uid(22), []resourceapi.DeviceRequestAllocationResult{
		{Request: "watch", Driver: ttyDriver, Device: "tty17", AdminAccess: &yes},
	})
	got := n.prepare(ttyDriver, admin)
	if !strings.Contains(got.Error, "tty.conf: cdi_spec container_edits: hook createContainer /usr/bin/hook: the program is writable by its group or others (mode 0777)") {
		t.Fatalf("the admin claim's prepare: %+v", got)
	}
	if files := n.specFiles(); !slices.Equal(files, before) {
		t.Fatalf("spec files %v after the refused prepare, want %v", files, before)
	}
}
