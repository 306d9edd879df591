package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/test/fixture"
)

// sriovHost has an SR-IOV GPU PF (8 VFs possible, none created) and a
// plain GPU.
func sriovHost() fixture.Host {
	return fixture.Host{GPUs: []fixture.GPU{
		{Addr: "0000:03:00.0", Vendor: "0x8086", Device: "0x56c0", NUMA: fixture.Int(0), Driver: "i915",
			Card: 0, Render: 128, Control: -1, TotalVFs: 8, IOMMUGroup: fixture.Int(3)},
		gpuAt("0000:04:00.0", "0x8086", 0, 1),
	}}
}

// sriovNode is a node with the simulated kernel running.
func sriovNode(t *testing.T, h fixture.Host) *ctlNode {
	t.Helper()
	n, _ := sriovKernel(t, h)
	return n
}

// sriovKernel is sriovNode that also returns the simulated kernel.
func sriovKernel(t *testing.T, h fixture.Host) (*ctlNode, *fixture.Kernel) {
	t.Helper()
	n := newCtlNode(t, h, nil)
	k, err := fixture.StartKernel(n.root, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k.Stop()
		if r := k.Refused(); len(r) > 0 {
			t.Errorf("the kernel refused writes: %v", r)
		}
	})
	return n, k
}

func sriovConf(args string) string {
	return `{"cdiVersion":"0.0.2","name":"vgpus","type":"vgpu","plugin":"sriov","args":` + args + `}`
}

const drmDelegate = `"delegate":{"plugin":"drm","args":{"want_device_nodes":["render"]}}`

func (n *ctlNode) sriov(conf string, env ...string) result {
	n.t.Helper()
	return runBin(n.t, filepath.Join(binDir, "sriov"), conf, append([]string{
		"CDI_HOST_ROOT=" + n.root, "CDI_STATE_DIR=" + n.state, "CDI_PATH=" + n.scripts + ":" + binDir,
	}, env...))
}

func (n *ctlNode) numVFs(pf string) string {
	b, err := os.ReadFile(filepath.Join(n.root, "sys/bus/pci/devices", pf, "sriov_numvfs"))
	if err != nil {
		n.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestSRIOVDelegateToDRM(t *testing.T) {
	n := sriovNode(t, sriovHost())
	conf := sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":4,` + drmDelegate + `}`)
	if got := n.sriov(conf, "CDI_COMMAND=INFO").obj(t)["vgpu"]; got != float64(4) {
		t.Fatalf("INFO = %v", got)
	}
	if n.numVFs("0000:03:00.0") != "0" {
		t.Fatal("INFO partitioned the PF")
	}
	// The first ADD creates the VFs and hands out the first VF's render node.
	r := n.sriov(conf, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID=a")
	if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/dri/renderD160" {
		t.Fatalf("ADD: %s %s", r.stdout, r.stderr)
	}
	if n.numVFs("0000:03:00.0") != "4" {
		t.Fatalf("numvfs = %s", n.numVFs("0000:03:00.0"))
	}
	// The second reuses them.
	vf0, _ := os.Stat(filepath.Join(n.root, "sys/devices/pci0000:03/0000:03:00.1"))
	r = n.sriov(conf, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:2", "CDI_REQUEST_ID=b")
	if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/dri/renderD161 /dev/dri/renderD162" {
		t.Fatalf("second ADD: %s", r.stdout)
	}
	if again, _ := os.Stat(filepath.Join(n.root, "sys/devices/pci0000:03/0000:03:00.1")); !os.SameFile(vf0, again) {
		t.Fatal("VFs were re-created")
	}
	// The delegate recorded exactly those VFs under the same request-ids.
	drm := n.records("drm")
	if drm["a"] == nil || drm["a"].Devices()[0].Key != "0000:03:00.1" || len(drm["b"].Devices()) != 2 {
		t.Fatalf("drm store: %+v", drm)
	}
	// DEVICES lists the VFs, usable (the delegate judges them), and who
	// holds them.
	var held []string
	for _, d := range n.sriovDevices(conf) {
		if !d.Usable {
			t.Fatalf("VF %s unusable with a delegate: %s", d.Key, d.Reason)
		}
		held = append(held, d.Key+"="+d.HeldBy)
	}
	if strings.Join(held, " ") != "0000:03:00.1=a 0000:03:00.2=b 0000:03:00.3=b 0000:03:00.4=" {
		t.Fatalf("DEVICES: %v", held)
	}
	// Replay answers from the record.
	if r := n.sriov(conf, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID=a"); strings.Join(r.devices(t), " ") != "/dev/dri/renderD160" {
		t.Fatalf("replay: %s", r.stdout)
	}
	// A plain drm config sees neither the PF (it has VFs) nor the VFs.
	plain := drmConf(`{}`)
	if got := n.run("drm", plain, "CDI_COMMAND=INFO").obj(t)["gpu"]; got != float64(1) {
		t.Fatalf("plain drm INFO = %v", got)
	}
	if d := n.run("drm", plain, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=p").devices(t); d[0] != "/dev/dri/card1" {
		t.Fatalf("plain drm ADD: %v", d)
	}
	// Changing num_vfs while VFs are allocated never re-partitions.
	two := sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":2,` + drmDelegate + `}`)
	if r := n.sriov(two, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID=c"); r.status != 0 || n.numVFs("0000:03:00.0") != "4" {
		t.Fatalf("busy PF: %s numvfs=%s", r.stdout, n.numVFs("0000:03:00.0"))
	}
	// DEL chains to the delegate; the VFs stay.
	for _, id := range []string{"a", "b", "c"} {
		if r := n.sriov(conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+id); r.status != 0 || r.stdout != "" {
			t.Fatalf("DEL %s: %s", id, r.stdout)
		}
	}
	if drm := n.records("drm"); len(drm) != 1 || drm["p"] == nil {
		t.Fatalf("delegate records after DEL: %v", drm)
	}
	if len(n.records("sriov")) != 0 || n.numVFs("0000:03:00.0") != "4" {
		t.Fatal("sriov records left or VFs removed")
	}
	// With nothing allocated, a new count is applied: 0 first, then 2.
	if r := n.sriov(two, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:2", "CDI_REQUEST_ID=d"); r.status != 0 || n.numVFs("0000:03:00.0") != "2" {
		t.Fatalf("re-partition: %s numvfs=%s", r.stdout, n.numVFs("0000:03:00.0"))
	}
	if r := n.sriov(two, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID=e"); r.code(t) != 103 {
		t.Fatalf("beyond the VFs: %s", r.stdout)
	}
	// The delegate's configs name a different VF set each time; its
	// discovery cache is still one file (docs/performance.md).
	if files, _ := filepath.Glob(filepath.Join(n.state, "*.cache*")); len(files) != 1 || filepath.Base(files[0]) != "drm.cache" {
		t.Errorf("cache files in the state directory: %v", files)
	}
}

func TestSRIOVVFIO(t *testing.T) {
	n := sriovNode(t, sriovHost())
	conf := sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":2,"vf_driver":"vfio-pci","drivers_autoprobe":false}`)
	r := n.sriov(conf, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:2", "CDI_REQUEST_ID=v")
	if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/vfio/301 /dev/vfio/302 /dev/vfio/vfio" {
		t.Fatalf("ADD: %s %s", r.stdout, r.stderr)
	}
	drv, _ := os.Readlink(filepath.Join(n.root, "sys/bus/pci/devices/0000:03:00.1/driver"))
	if filepath.Base(drv) != "vfio-pci" {
		t.Fatalf("VF bound to %q", drv)
	}
	if r := n.sriov(conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=v"); r.status != 0 || r.stdout != "" {
		t.Fatalf("DEL: %s", r.stdout)
	}
}

// Without a delegate or vf_driver, only VFs bound to vfio-pci are handed
// out, judged by their driver link: a VF left on i915 is not, even when a
// /dev/vfio node of its group exists. DEVICES and cdictl say why.
func TestSRIOVVFIOOnlyVFIOBound(t *testing.T) {
	n := sriovNode(t, sriovHost())
	conf := sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":2}`)
	if err := os.MkdirAll(filepath.Join(n.conf, "vgpu.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.conf, "vgpu.d/sriov.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// Before the first ADD, DEVICES shows the PF and what ADD will do.
	if d := n.sriovDevices(conf); len(d) != 1 || d[0].Key != "0000:03:00.0" || d[0].Usable || !strings.Contains(d[0].Reason, "next ADD creates 2") {
		t.Fatalf("DEVICES before partitioning: %+v", d)
	}
	// The admin partitions the PF (autoprobe binds both VFs to i915), binds
	// the second VF to vfio-pci, and the first VF's group has a node left.
	n.partition("0000:03:00.0", 2)
	n.bindVFIO("0000:03:00.2")
	if err := os.WriteFile(filepath.Join(n.root, "dev/vfio/301"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	d := n.sriovDevices(conf)
	if len(d) != 2 || d[0].Key != "0000:03:00.1" || d[0].Usable || d[0].Reason != "bound to i915, not vfio-pci (bind it to vfio-pci, or set vf_driver)" ||
		d[1].Key != "0000:03:00.2" || !d[1].Usable || strings.Join(d[1].Nodes, " ") != "/dev/vfio/302" || d[1].VendorID != "0x8086" || d[1].DeviceID != "0x56c0" {
		t.Fatalf("DEVICES: %+v", d)
	}
	if got := n.sriov(conf, "CDI_COMMAND=INFO").obj(t)["vgpu"]; got != float64(1) {
		t.Fatalf("INFO = %v, want the one usable VF", got)
	}
	if r := n.sriov(conf, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:2", "CDI_REQUEST_ID=two"); r.code(t) != 103 {
		t.Fatalf("ADD of 2 with one usable VF: %s", r.stdout)
	}
	r := n.sriov(conf, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID=one")
	if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/vfio/302 /dev/vfio/vfio" {
		t.Fatalf("ADD: %s", r.stdout)
	}
	// cdictl shows the reason and the holder.
	out := n.ctl("devices", "-o", "table", "vgpu").stdout
	if !strings.Contains(out, "unusable: bound to i915, not vfio-pci") || !strings.Contains(out, "held by one") {
		t.Fatalf("cdictl devices:\n%s", out)
	}
}

// sriovDevices runs DEVICES and decodes the inventory.
func (n *ctlNode) sriovDevices(conf string) []protocol.DeviceInfo {
	n.t.Helper()
	r := n.sriov(conf, "CDI_COMMAND=DEVICES")
	var out struct{ Devices []protocol.DeviceInfo }
	if err := json.Unmarshal([]byte(r.stdout), &out); r.status != 0 || err != nil {
		n.t.Fatalf("DEVICES: %d %s %v", r.status, r.stdout, err)
	}
	return out.Devices
}

// partition writes sriov_numvfs as an admin would and waits for the
// simulated kernel to create the VFs.
func (n *ctlNode) partition(pf string, vfs int) {
	n.t.Helper()
	dir := filepath.Join(n.root, "sys/bus/pci/devices", pf)
	if err := os.WriteFile(filepath.Join(dir, "sriov_numvfs"), []byte(strconv.Itoa(vfs)), 0o644); err != nil {
		n.t.Fatal(err)
	}
	for k := range vfs {
		n.await(func() bool {
			_, err := os.Stat(filepath.Join(dir, fmt.Sprintf("virtfn%d", k), "driver"))
			return err == nil
		})
	}
}

// bindVFIO binds a VF to vfio-pci through driver_override and
// drivers_probe, as an admin would, and waits for the driver link.
func (n *ctlNode) bindVFIO(vf string) {
	n.t.Helper()
	dir := filepath.Join(n.root, "sys/bus/pci/devices", vf)
	if err := os.WriteFile(filepath.Join(dir, "driver_override"), []byte("vfio-pci"), 0o644); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.root, "sys/bus/pci/drivers_probe"), []byte(vf), 0o644); err != nil {
		n.t.Fatal(err)
	}
	n.await(func() bool {
		l, _ := os.Readlink(filepath.Join(dir, "driver"))
		return filepath.Base(l) == "vfio-pci"
	})
}

// await polls until ok, failing the test after 10 seconds: a simulated
// kernel that never gets there is a broken fixture, not a slow machine.
func (n *node) await(ok func() bool) {
	n.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			n.t.Fatal("the simulated kernel did not get there in 10 s")
		}
	}
}

// A failing delegate fails the ADD with 108 carrying its error, and
// nothing stays allocated.
func TestSRIOVDelegateFailureRollsBack(t *testing.T) {
	n := sriovNode(t, sriovHost())
	n.script("broken", `cat >/dev/null; echo '{"cdiVersion":"0.0.2","code":103,"msg":"Insufficient free resources","details":"nope"}'; exit 1`)
	conf := sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":2,"delegate":{"plugin":"broken"}}`)
	r := n.sriov(conf, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID=x")
	if r.status != 1 || r.code(t) != 108 || !strings.Contains(r.stdout, `\"code\":103`) {
		t.Fatalf("ADD: %s", r.stdout)
	}
	if recs := n.records("sriov"); len(recs) != 0 {
		t.Fatalf("records left: %v", recs)
	}
	// A delegate missing from CDI_PATH is 108 too.
	conf = sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":2,"delegate":{"plugin":"absent"}}`)
	if r := n.sriov(conf, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID=x"); r.code(t) != 108 {
		t.Fatalf("missing delegate: %s", r.stdout)
	}
}

// A write to sriov_numvfs that never completes is bounded: 107 naming the
// file.
func TestSRIOVSetupTimeout(t *testing.T) {
	h := sriovHost()
	n := newCtlNode(t, h, nil)
	p := filepath.Join(n.root, "sys/devices/pci0000:03/0000:03:00.0/sriov_numvfs")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	// numvfs reads block on a FIFO too; the PF's count comes from INFO-free
	// ADD only, so give the plugin a reader-less FIFO to write to.
	conf := sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":2,"setup_timeout":"300ms"}`)
	r := n.sriov(conf, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID=t")
	if r.status != 1 || r.code(t) != 107 || !strings.Contains(r.stdout, "sriov_numvfs") {
		t.Fatalf("ADD: %d %s %s", r.status, r.stdout, r.stderr)
	}
}

// A VF whose removal never finishes keeps its virtfn link: re-partitioning
// waits for exactly the new count of VFs, up to the setup timeout, then
// fails with 107 naming the PF; it never writes the new count over a PF
// that still has a VF (the kernel would refuse it with EBUSY).
func TestSRIOVWaitsForExactVFs(t *testing.T) {
	n, k := sriovKernel(t, sriovHost())
	four := sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":4,` + drmDelegate + `}`)
	if r := n.sriov(four, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID=a"); r.status != 0 {
		t.Fatalf("ADD: %s", r.stdout)
	}
	if r := n.sriov(four, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=a"); r.status != 0 {
		t.Fatalf("DEL: %s", r.stdout)
	}
	k.HoldVF("0000:03:00.0", 3)
	two := sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":2,"setup_timeout":"500ms",` + drmDelegate + `}`)
	r := n.sriov(two, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID=b")
	if r.status != 1 || r.code(t) != 107 || !strings.Contains(r.stdout, "exactly 0 VFs of 0000:03:00.0") {
		t.Fatalf("ADD with virtfn3 stuck: %d %s", r.status, r.stdout)
	}
	if recs := n.records("sriov"); len(recs) != 0 {
		t.Fatalf("records left: %v", recs)
	}
}

// Without a PF driver the kernel refuses the write; without any VFs the
// ADD cannot complete, and both are clear errors.
func TestSRIOVArgErrors(t *testing.T) {
	n := newCtlNode(t, sriovHost(), nil)
	for _, args := range []string{
		`{"num_vfs":2}`,
		`{"pf_pci_addresses":["0000:03:00.0"]}`,
		`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":0}`,
		`{"pf_pci_addresses":["3:00.0"],"num_vfs":2}`,
		`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":2,"delegate":{"plugin":"../drm"}}`,
		`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":2,"numvfs":2}`,
		`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":2,"setup_timeout":"soon"}`,
		`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":2,"allow_noiommu":true,` + drmDelegate + `}`,
	} {
		if r := n.sriov(sriovConf(args), "CDI_COMMAND=INFO"); r.code(t) != 101 {
			t.Errorf("%s: %s", args, r.stdout)
		}
	}
}

// GC frees stale sriov requests and sends their delegates a DEL first.
func TestSRIOVGC(t *testing.T) {
	n := sriovNode(t, sriovHost())
	conf := sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":3,` + drmDelegate + `}`)
	for _, id := range []string{"live", "stale"} {
		if r := n.sriov(conf, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID="+id); r.status != 0 {
			t.Fatalf("ADD %s: %s", id, r.stdout)
		}
	}
	r := n.sriov(conf, "CDI_COMMAND=GC", "CDI_VALID_REQUEST_IDS=live")
	if r.status != 0 || !strings.Contains(r.stdout, `"stale"`) || strings.Contains(r.stdout, "errors") {
		t.Fatalf("GC: %s", r.stdout)
	}
	if recs := n.records("sriov"); len(recs) != 1 || recs["live"] == nil {
		t.Fatalf("sriov records: %v", recs)
	}
	if recs := n.records("drm"); len(recs) != 1 || recs["live"] == nil {
		t.Fatalf("delegate records: %v", recs)
	}
}

// Before the first ADD, with a delegate, DEVICES lists the VFs the PF
// will have, under the addresses they will get (the PF's sriov_offset and
// sriov_stride), usable and naming their PF; a pinned ADD of one of them
// creates the VFs and hands out exactly that one, as the DRA mode asks.
func TestSRIOVDevicesBeforePartitioning(t *testing.T) {
	n := sriovNode(t, sriovHost())
	conf := sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":4,` + drmDelegate + `}`)
	var got []string
	for _, d := range n.sriovDevices(conf) {
		if !d.Usable || d.PhysFn != "0000:03:00.0" || d.HeldBy != "" {
			t.Fatalf("a VF to be created: %+v", d)
		}
		got = append(got, d.Key)
	}
	if strings.Join(got, " ") != "0000:03:00.1 0000:03:00.2 0000:03:00.3 0000:03:00.4" {
		t.Fatalf("DEVICES before partitioning: %v", got)
	}
	if n.numVFs("0000:03:00.0") != "0" {
		t.Fatal("DEVICES partitioned the PF")
	}
	r := n.sriov(conf, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID=pinned", "CDI_REQUEST_DEVICES=0000:03:00.3")
	if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/dri/renderD162" {
		t.Fatalf("pinned ADD of a VF to be created: %s %s", r.stdout, r.stderr)
	}
	if n.numVFs("0000:03:00.0") != "4" {
		t.Fatalf("numvfs = %s", n.numVFs("0000:03:00.0"))
	}
	var held []string
	for _, d := range n.sriovDevices(conf) {
		if d.PhysFn != "0000:03:00.0" {
			t.Fatalf("VF %s names its PF %q", d.Key, d.PhysFn)
		}
		held = append(held, d.Key+"="+d.HeldBy)
	}
	if strings.Join(held, " ") != "0000:03:00.1= 0000:03:00.2= 0000:03:00.3=pinned 0000:03:00.4=" {
		t.Fatalf("DEVICES after the pinned ADD: %v", held)
	}
}

// A VF of a no-IOMMU group is not handed out unless the config says
// allow_noiommu: INFO does not count it, DEVICES lists it unusable,
// marked noiommu, with its noiommu node, and a pinned ADD of it is 103
// with the reason; an ADD that binds a VF (vf_driver) and finds its group
// without an IOMMU refuses (107), and the next ADD takes the other VF. With
// allow_noiommu it goes as /dev/vfio/noiommu-<group>.
func TestSRIOVNoIOMMU(t *testing.T) {
	h := sriovHost()
	h.NoIOMMUGroups = []int{301}
	n := sriovNode(t, h)
	conf := sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":2}`)
	n.partition("0000:03:00.0", 2)
	n.bindVFIO("0000:03:00.1")
	n.bindVFIO("0000:03:00.2")
	const why = "IOMMU group 301 is a no-IOMMU group (/dev/vfio/noiommu-301)"
	d := n.sriovDevices(conf)
	if len(d) != 2 || d[0].Usable || !d[0].NoIOMMU || !strings.Contains(d[0].Reason, why) || strings.Join(d[0].Nodes, " ") != "/dev/vfio/noiommu-301" ||
		!d[1].Usable || d[1].NoIOMMU || strings.Join(d[1].Nodes, " ") != "/dev/vfio/302" {
		t.Fatalf("DEVICES: %+v", d)
	}
	if got := n.sriov(conf, "CDI_COMMAND=INFO").obj(t)["vgpu"]; got != float64(1) {
		t.Fatalf("INFO = %v, want the VF with an IOMMU only", got)
	}
	r := n.sriov(conf, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID=p", "CDI_REQUEST_DEVICES=0000:03:00.1")
	if r.code(t) != 103 || !strings.Contains(r.stdout, "0000:03:00.1: "+why) || !strings.Contains(r.stdout, "allow_noiommu") {
		t.Fatalf("pinned ADD of the no-IOMMU VF: %s", r.stdout)
	}
	allowed := sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":2,"allow_noiommu":true}`)
	if got := n.sriov(allowed, "CDI_COMMAND=INFO").obj(t)["vgpu"]; got != float64(2) {
		t.Fatalf("INFO with allow_noiommu = %v", got)
	}
	r = n.sriov(allowed, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID=p", "CDI_REQUEST_DEVICES=0000:03:00.1")
	if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/vfio/noiommu-301 /dev/vfio/vfio" {
		t.Fatalf("pinned ADD with allow_noiommu: %s", r.stdout)
	}

	// vf_driver: the VFs get their groups' nodes only when ADD binds them.
	n = sriovNode(t, h)
	conf = sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":2,"vf_driver":"vfio-pci","drivers_autoprobe":false}`)
	r = n.sriov(conf, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:2", "CDI_REQUEST_ID=v")
	if r.code(t) != 107 || !strings.Contains(r.stdout, "VF 0000:03:00.1: "+why) {
		t.Fatalf("ADD that binds a no-IOMMU VF: %s", r.stdout)
	}
	r = n.sriov(conf, "CDI_COMMAND=ADD", "CDI_REQUEST=vgpu:1", "CDI_REQUEST_ID=v")
	if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/vfio/302 /dev/vfio/vfio" {
		t.Fatalf("ADD after: %s", r.stdout)
	}
}
