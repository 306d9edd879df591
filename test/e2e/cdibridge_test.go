package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/cdi-exec/plugins/test/fixture"
)

// loadCache loads a spec directory with the upstream library, failing on any
// error it reports for our files.
func loadCache(t *testing.T, dir string) *cdi.Cache {
	t.Helper()
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("upstream cache: %v", err)
	}
	for path, errs := range c.GetErrors() {
		t.Fatalf("upstream cache rejects %s: %v", path, errs)
	}
	return c
}

// inject runs the upstream injection into an empty OCI spec.
func inject(t *testing.T, c *cdi.Cache, device string) *oci.Spec {
	t.Helper()
	spec := &oci.Spec{Linux: &oci.Linux{}}
	if unresolved, err := c.InjectDevices(spec, device); err != nil {
		t.Fatalf("injecting %s: %v (unresolved %v)", device, err, unresolved)
	}
	return spec
}

// needRealNodes skips a test that hands the specs to the upstream CDI
// library when the fixture cannot make real device nodes: its 0:0 nodes
// carry no numbers, and the library then looks the nodes up in the real
// /dev.
func needRealNodes(t *testing.T) {
	t.Helper()
	if got := fixture.NodesIn(t.TempDir()); got != fixture.RealNodes {
		t.Skipf("needs real device nodes (CAP_MKNOD), and this machine makes %s: the CDI library resolves 0:0 nodes against the machine's own /dev", got)
	}
}

func TestCDISpecWithUpstreamLibrary(t *testing.T) {
	needRealNodes(t)
	n := newNode(t, eightGPUs())
	dir := filepath.Join(t.TempDir(), "cdi")
	conf := drmConf(`{"cdi_spec":{"kind":"example.com/gpu","dir":"` + dir + `"}}`)
	r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:2", "CDI_REQUEST_ID=pod1")
	var names []string
	for _, v := range r.obj(t)["cdiDevices"].([]any) {
		names = append(names, v.(string))
	}
	if r.status != 0 || len(names) != 1 || names[0] != "example.com/gpu=pod1" {
		t.Fatalf("ADD: %s", r.stdout)
	}
	// The file's name records the store that wrote it.
	path := filepath.Join(dir, "example.com-gpu_pod1_drm-"+n.storeID("drm")+".json")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("spec file: %v %v", fi, err)
	}
	// The upstream library accepts the file and injects the nodes.
	c := loadCache(t, dir)
	spec := inject(t, c, names[0])
	var got []string
	for _, d := range spec.Linux.Devices {
		got = append(got, d.Path)
		if d.Type != "c" || d.Major != 226 {
			t.Errorf("device %s: type %s major %d", d.Path, d.Type, d.Major)
		}
	}
	want := []string{"/dev/dri/card0", "/dev/dri/renderD128", "/dev/dri/card1", "/dev/dri/renderD129"}
	if !slices.Equal(got, want) {
		t.Fatalf("injected %v, want %v", got, want)
	}
	if spec.Linux.Devices[1].Minor != 128 || spec.Linux.Devices[2].Minor != 1 {
		t.Fatalf("minor numbers: %+v", spec.Linux.Devices)
	}
	// Each node gets a cgroup rule allowing it.
	if spec.Linux.Resources == nil || len(spec.Linux.Resources.Devices) != 4 {
		t.Fatalf("cgroup rules: %+v", spec.Linux.Resources)
	}
	for i, rule := range spec.Linux.Resources.Devices {
		if !rule.Allow || rule.Type != "c" || *rule.Major != 226 || *rule.Minor != spec.Linux.Devices[i].Minor || rule.Access != "rwm" {
			t.Errorf("rule %d: %+v", i, rule)
		}
	}
	// DEL removes the file.
	if r := n.run("drm", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=pod1"); r.status != 0 || r.stdout != "" {
		t.Fatalf("DEL: %s", r.stdout)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("spec file survived DEL")
	}
	// Without cdi_spec the answer is unchanged.
	if r := n.run("drm", drmConf(`{}`), "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=plain"); strings.Contains(r.stdout, "cdiDevices") {
		t.Fatalf("cdiDevices without cdi_spec: %s", r.stdout)
	}
}

// One spec per plugin and request-id: when the id gains another
// resource-spec (here a second config of the same plugin), the file is
// rewritten with every node; a trailing-hyphen id gets its mapped name.
func TestCDISpecRewriteAndNames(t *testing.T) {
	needRealNodes(t)
	n := newNode(t, fixture.Host{TTYs: map[string]int{"tty": 20, "ttyS": 4}})
	dir := filepath.Join(t.TempDir(), "cdi")
	spec := `"cdi_spec":{"kind":"example.com/tty","dir":"` + dir + `"}`
	vt := `{"cdiVersion":"0.0.2","name":"vt","type":"tty","plugin":"generic-tty","args":{"num_system_reserved":12,` + spec + `}}`
	serial := `{"cdiVersion":"0.0.2","name":"serial","type":"serial","plugin":"generic-tty","args":{"pattern":"ttyS",` + spec + `}}`
	if r := n.run("generic-tty", vt, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=job-"); r.status != 0 {
		t.Fatal(r.stdout)
	}
	r := n.run("generic-tty", serial, "CDI_COMMAND=ADD", "CDI_REQUEST=serial:2", "CDI_REQUEST_ID=job-")
	if r.status != 0 || !strings.Contains(r.stdout, `"example.com/tty=job-_0"`) {
		t.Fatalf("second ADD: %s", r.stdout)
	}
	c := loadCache(t, dir)
	got := inject(t, c, "example.com/tty=job-_0").Linux.Devices
	var paths []string
	for _, d := range got {
		paths = append(paths, d.Path)
	}
	if strings.Join(paths, " ") != "/dev/tty13 /dev/ttyS0 /dev/ttyS1" {
		t.Fatalf("rewritten spec has %v", paths)
	}
	if got[1].Major != 4 || got[1].Minor != 64 {
		t.Fatalf("ttyS0 numbers: %+v", got[1])
	}
}

// Specs left by a crash are removed by the next ADD, DEL or GC of the store
// that wrote them; files the store does not own (written by hand, another
// kind) stay. A spec that cannot be written fails the ADD and takes the
// allocation back.
func TestCDISpecOrphansAndFailures(t *testing.T) {
	n := newNode(t, eightGPUs())
	dir := filepath.Join(t.TempDir(), "cdi")
	conf := drmConf(`{"cdi_spec":{"kind":"example.com/gpu","dir":"` + dir + `"}}`)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// orphan makes id's spec the way a crash between DEL's commit and the
	// file's removal leaves it: the file, and no record.
	orphan := func(id string) string {
		if r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID="+id); r.status != 0 {
			t.Fatal(r.stdout)
		}
		n.forget("drm", id)
		return filepath.Join(dir, "example.com-gpu_"+id+"_drm-"+n.storeID("drm")+".json")
	}
	var others []string
	for name, body := range map[string]string{
		"other.com-gpu_x.json":       "{}",
		"example.com-gpu_ghost.json": `{"cdiVersion":"0.3.0","kind":"example.com/gpu","devices":[{"name":"byhand","containerEdits":{"deviceNodes":[{"path":"/dev/dri/card7"}]}}]}`,
	} {
		others = append(others, filepath.Join(dir, name))
		if err := os.WriteFile(others[len(others)-1], []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ghost := orphan("ghost1")
	if r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=a"); r.status != 0 {
		t.Fatal(r.stdout)
	}
	if _, err := os.Stat(ghost); !os.IsNotExist(err) {
		t.Fatal("ADD left an orphaned spec")
	}
	ghost = orphan("ghost2")
	if r := n.run("drm", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=ghost2"); r.code(t) != 5 {
		t.Fatal(r.stdout)
	}
	if _, err := os.Stat(ghost); !os.IsNotExist(err) {
		t.Fatal("DEL of the orphan's id left its spec")
	}
	ghost = orphan("ghost3")
	if r := n.run("drm", conf, "CDI_COMMAND=GC", "CDI_VALID_REQUEST_IDS=a"); r.status != 0 {
		t.Fatal(r.stdout)
	}
	if _, err := os.Stat(ghost); !os.IsNotExist(err) {
		t.Fatal("GC left an orphaned spec")
	}
	if _, err := os.Stat(filepath.Join(dir, "example.com-gpu_a_drm-"+n.storeID("drm")+".json")); err != nil {
		t.Fatal("GC removed a valid spec")
	}
	// A DEL of the id of a file this store does not own leaves it.
	if r := n.run("drm", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=ghost"); r.code(t) != 5 {
		t.Fatal(r.stdout)
	}
	for _, p := range others {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("a file the store does not own was removed: %v", err)
		}
	}
	// An ADD whose device name a file it does not own already defines: 107,
	// the allocation is taken back and the file is left alone.
	if r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=ghost"); r.status != 1 || r.code(t) != 107 || !strings.Contains(r.stdout, "does not own") {
		t.Fatalf("ADD over a foreign device name: %s", r.stdout)
	}
	// An unwritable spec directory: 107, and the GPU is free again.
	blocked := drmConf(`{"cdi_spec":{"kind":"example.com/gpu","dir":"` + others[0] + `"}}`)
	if r := n.run("drm", blocked, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=b"); r.status != 1 || r.code(t) != 107 {
		t.Fatalf("ADD with a bad dir: %s", r.stdout)
	}
	if recs := n.records("drm"); len(recs) != 1 || recs["a"] == nil {
		t.Fatalf("allocations not taken back: %v", recs)
	}
	// Kinds that break the upstream naming rules are config errors.
	for _, kind := range []string{"gpu", "example.com/", "/gpu", "exa mple.com/gpu", "example.com/gpu-", "-example.com/gpu"} {
		bad := drmConf(`{"cdi_spec":{"kind":"` + kind + `"}}`)
		if r := n.run("drm", bad, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=c"); r.code(t) != 101 {
			t.Errorf("kind %q: %s", kind, r.stdout)
		}
	}
}

// Two stores (two nodes' state, or two callers) share a CDI kind and a
// spec directory, for whole GPUs and for sriov VFs handed out through the
// drm delegate. Each adds, deletes and collects; neither ever removes or
// rewrites the other's files, and the directory stays loadable.
func TestCDISpecOwnership(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cdi")
	gpu := drmConf(`{"cdi_spec":{"kind":"example.com/gpu","dir":"` + dir + `"}}`)
	vgpu := sriovConf(`{"pf_pci_addresses":["0000:03:00.0"],"num_vfs":4,` + drmDelegate + `,"cdi_spec":{"kind":"example.com/vgpu","dir":"` + dir + `"}}`)
	h := sriovHost()
	h.GPUs = append(h.GPUs, gpuAt("0000:05:00.0", "0x10de", 2, 0), gpuAt("0000:06:00.0", "0x10de", 3, 0))
	a, b := sriovNode(t, h), sriovNode(t, h)
	run := func(n *ctlNode, plugin, conf string, env ...string) result {
		t.Helper()
		if plugin == "sriov" {
			return n.sriov(conf, env...) // with the delegate on CDI_PATH
		}
		return n.run(plugin, conf, env...)
	}
	expect := func(code int, n *ctlNode, plugin, conf string, env ...string) {
		t.Helper()
		if r := run(n, plugin, conf, env...); r.code(t) != code {
			t.Fatalf("%s %v: %s, want code %d", plugin, env, r.stdout, code)
		}
	}
	ok := func(n *ctlNode, plugin, conf string, env ...string) { t.Helper(); expect(0, n, plugin, conf, env...) }
	add := func(id string) []string { return []string{"CDI_COMMAND=ADD", "CDI_REQUEST_ID=" + id} }
	// specs lists the files as kind/request-id and, with owners set,
	// checks that each file's name ends with the store that wrote it.
	specs := func(owners map[string]*ctlNode) string {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		var out []string
		for _, p := range paths {
			kind, rest, _ := strings.Cut(strings.TrimPrefix(filepath.Base(p), "example.com-"), "_")
			id, owner, _ := strings.Cut(strings.TrimSuffix(rest, ".json"), "_")
			plugin := map[string]string{"gpu": "drm", "vgpu": "sriov"}[kind]
			if n := owners[id]; n != nil && owner != plugin+"-"+n.storeID(plugin) {
				t.Errorf("%s: owner %q is not the store that wrote it", p, owner)
			}
			out = append(out, kind+"/"+id)
		}
		return strings.Join(out, " ")
	}
	ok(a, "drm", gpu, append(add("a1"), "CDI_REQUEST=gpu:1")...)
	ok(a, "drm", gpu, append(add("a2"), "CDI_REQUEST=gpu:1")...)
	ok(a, "sriov", vgpu, append(add("va"), "CDI_REQUEST=vgpu:1")...)
	// b's ADDs look for orphans: a's files hold nothing in b's store.
	ok(b, "drm", gpu, append(add("b1"), "CDI_REQUEST=gpu:1")...)
	ok(b, "sriov", vgpu, append(add("vb"), "CDI_REQUEST=vgpu:2")...)
	if got, want := specs(nil), "gpu/a1 gpu/a2 gpu/b1 vgpu/va vgpu/vb"; got != want {
		t.Fatalf("after both stores' ADDs: %s, want %s", got, want)
	}
	// b's DEL of a's ids, and b's GC, leave a's files.
	expect(5, b, "drm", gpu, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=a1")
	expect(5, b, "sriov", vgpu, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=va")
	ok(b, "drm", gpu, "CDI_COMMAND=GC", "CDI_VALID_REQUEST_IDS=none")
	ok(b, "sriov", vgpu, "CDI_COMMAND=GC", "CDI_VALID_REQUEST_IDS=vb")
	// b cannot take a device name a already defines.
	expect(107, b, "drm", gpu, append(add("a2"), "CDI_REQUEST=gpu:1")...)
	expect(107, b, "sriov", vgpu, append(add("va"), "CDI_REQUEST=vgpu:1")...)
	all := map[string]*ctlNode{"a1": a, "a2": a, "va": a, "vb": b}
	if got, want := specs(all), "gpu/a1 gpu/a2 vgpu/va vgpu/vb"; got != want {
		t.Fatalf("after b's DEL and GC: %s, want %s", got, want)
	}
	c := loadCache(t, dir)
	if d := inject(t, c, "example.com/vgpu=va").Linux.Devices; len(d) != 1 || d[0].Path != "/dev/dri/renderD160" {
		t.Fatalf("a's VF spec: %+v", d)
	}
	// a cleans up its own.
	for _, id := range []string{"a1", "a2"} {
		ok(a, "drm", gpu, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+id)
	}
	ok(a, "sriov", vgpu, "CDI_COMMAND=GC", "CDI_VALID_REQUEST_IDS=none")
	if got := specs(all); got != "vgpu/vb" {
		t.Fatalf("after a's DEL and GC: %s", got)
	}
}

// ADDs and DELs of the same request-ids at once, each ADD putting its spec
// in place under the store's lock and making it durable after it: however
// they interleave, the store's spec files are exactly the files of the
// request-ids it holds something for, each one whole (the upstream
// library loads them all), and no temporary file is left.
func TestCDISpecConcurrentAddDel(t *testing.T) {
	n := newNode(t, eightGPUs())
	dir := filepath.Join(t.TempDir(), "cdi")
	conf := drmConf(`{"cdi_spec":{"kind":"example.com/gpu","dir":"` + dir + `"}}`)
	const ids, rounds = 6, 3
	for round := range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{})
		results := make([]result, 2*ids)
		for i := range 2 * ids {
			env := []string{"CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1"}
			if i%2 == 1 {
				env = []string{"CDI_COMMAND=DEL"}
			}
			env = append(env, "CDI_LOCK_TIMEOUT=60", fmt.Sprintf("CDI_REQUEST_ID=p%d", i/2))
			wg.Go(func() {
				<-start
				results[i] = n.run("drm", conf, env...)
			})
		}
		close(start)
		wg.Wait()
		for i, r := range results {
			if i%2 == 0 && r.status != 0 {
				t.Fatalf("round %d: ADD of p%d: %s%s", round, i/2, r.stdout, r.stderr)
			}
		}
		suffix := "_drm-" + n.storeID("drm") + ".json"
		var files, held []string
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			id, ok := strings.CutSuffix(strings.TrimPrefix(e.Name(), "example.com-gpu_"), suffix)
			if !ok {
				t.Fatalf("round %d: %s left in the spec directory", round, e.Name())
			}
			files = append(files, id)
		}
		for id, rec := range n.records("drm") {
			if len(rec.Devices()) > 0 {
				held = append(held, id)
			}
		}
		slices.Sort(files)
		slices.Sort(held)
		if !slices.Equal(files, held) {
			t.Fatalf("round %d: spec files of %v, the store holds %v", round, files, held)
		}
		t.Logf("round %d: %d of %d request-ids hold their GPU", round, len(held), ids)
		loadCache(t, dir)
	}
}
