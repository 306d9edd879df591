package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// ctlNode is a node with a config directory and a plugin path: the real
// plugins plus any test scripts.
type ctlNode struct {
	*node
	conf    string
	scripts string
}

func newCtlNode(t *testing.T, h fixture.Host, confs map[string]string) *ctlNode {
	t.Helper()
	n := &ctlNode{node: newNode(t, h), conf: filepath.Join(t.TempDir(), "conf"), scripts: t.TempDir()}
	for rel, body := range confs {
		p := filepath.Join(n.conf, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// script installs a shell-script plugin on the node's plugin path.
func (n *ctlNode) script(name, body string) {
	n.t.Helper()
	if err := os.WriteFile(filepath.Join(n.scripts, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		n.t.Fatal(err)
	}
}

func (n *ctlNode) ctl(args ...string) result {
	n.t.Helper()
	cmd := append([]string{}, args...)
	return runArgs(n.t, filepath.Join(binDir, "cdictl"), cmd, []string{
		"CDI_HOST_ROOT=" + n.root, "CDI_STATE_DIR=" + n.state, "CDI_CONF_DIR=" + n.conf,
		"CDI_PATH=" + n.scripts + ":" + binDir, "PATH=" + os.Getenv("PATH"),
	})
}

func (r result) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("cdictl output is not JSON: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
}

// gcAnswer is cdictl gc's JSON answer.
type gcAnswer struct {
	DryRun  bool
	Results []struct {
		Plugin string
		Freed  []string
	}
}

// freed is how many ids the answer's plugins freed.
func (a gcAnswer) freed() int {
	n := 0
	for _, res := range a.Results {
		n += len(res.Freed)
	}
	return n
}

var ctlConfs = map[string]string{
	"gpu.d/drm.conf":         `{"cdiVersion":"0.0.1","name":"gpus","type":"gpu","plugin":"drm"}`,
	"tty.d/generic-tty.conf": `{"cdiVersion":"0.0.1","name":"ttys","type":"tty","plugin":"generic-tty","args":{"num_system_reserved":12}}`,
}

func ctlHost() fixture.Host {
	h := eightGPUs()
	h.TTYs = map[string]int{"tty": 20}
	return h
}

func TestCdictlInfoAndVersion(t *testing.T) {
	confs := map[string]string{
		"gpu.d/drm.conf":         ctlConfs["gpu.d/drm.conf"],
		"gpu.d/second.conf":      `{"cdiVersion":"0.0.2","name":"more gpus","type":"gpu","plugin":"drm","args":{"vendorid_whitelist":["0x1002"]}}`,
		"tty.d/generic-tty.conf": ctlConfs["tty.d/generic-tty.conf"],
		"tty.d/wrong.conf":       `{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm"}`,
		"tty.d/escape.conf":      `{"cdiVersion":"0.0.1","name":"x","type":"tty","plugin":"../bin/sh"}`,
		"tty.d/broken.conf":      `{`,
		"bad_type.d/x.conf":      `{}`,
	}
	n := newCtlNode(t, ctlHost(), confs)
	r := n.ctl("info")
	var caps map[string]any
	r.json(t, &caps)
	// 8 + 4 GPUs from two configs; 7 ttys (tty13..tty19). The configs
	// that cannot be used make the command fail after it reported the rest.
	if r.status != 1 || caps["gpu"] != float64(12) || caps["tty"] != float64(7) || caps["cdiVersion"] != "0.0.2" {
		t.Fatalf("info: %d %v\n%s", r.status, caps, r.stderr)
	}
	for _, want := range []string{"wrong.conf", "does not match its folder", "escape.conf", "broken.conf", "bad_type.d"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr does not report %q:\n%s", want, r.stderr)
		}
	}
	r = n.ctl("info", "tty")
	caps = nil
	r.json(t, &caps)
	if _, ok := caps["gpu"]; ok || caps["tty"] != float64(7) {
		t.Fatalf("info tty: %v", caps)
	}
	var v struct {
		Plugins []struct {
			Plugin, Negotiated string
			Compatible         bool
		}
	}
	r = n.ctl("version", "gpu")
	r.json(t, &v)
	if r.status != 0 || len(v.Plugins) != 2 || v.Plugins[0].Negotiated != "0.0.2" || !v.Plugins[0].Compatible {
		t.Fatalf("version: %s", r.stdout)
	}
	if r := n.ctl("info", "-o", "table"); !strings.HasPrefix(r.stdout, "RESOURCE") {
		t.Fatalf("table: %s", r.stdout)
	}
}

func TestCdictlAddLsDelGC(t *testing.T) {
	n := newCtlNode(t, ctlHost(), ctlConfs)
	r := n.ctl("add", "--id", "pod-a", "--numa", "1", "gpu:2,tty:1")
	var add struct {
		Devices []string
		NUMA    []int `json:"numa_locality"`
	}
	r.json(t, &add)
	want := "/dev/dri/card4 /dev/dri/renderD132 /dev/dri/card5 /dev/dri/renderD133 /dev/tty13"
	if r.status != 0 || strings.Join(add.Devices, " ") != want || len(add.NUMA) != 1 || add.NUMA[0] != 1 {
		t.Fatalf("add: %d %s %s", r.status, r.stdout, r.stderr)
	}
	// All or nothing: the tty is allocated first, then the GPUs run out, so
	// the tty is freed again.
	r = n.ctl("add", "--id", "pod-b", "tty:1,gpu:7")
	var fail struct {
		Code    int
		Details string
	}
	r.json(t, &fail)
	if r.status != 1 || fail.Code != 103 || !strings.Contains(fail.Details, "drm.conf") {
		t.Fatalf("failing add: %d %s", r.status, r.stdout)
	}
	var ls struct {
		Allocations []struct {
			RequestID string
			Plugin    string
			Devices   []string
		}
	}
	r = n.ctl("ls")
	r.json(t, &ls)
	if len(ls.Allocations) != 2 {
		t.Fatalf("ls after add: %s", r.stdout)
	}
	for _, a := range ls.Allocations {
		if a.RequestID != "pod-a" {
			t.Fatalf("pod-b was not rolled back: %s", r.stdout)
		}
	}
	// GC keeps the valid ids and frees the rest.
	n.ctl("add", "--id", "pod-c", "tty:2")
	r = n.ctl("gc", "--valid", "pod-a")
	var gc gcAnswer
	r.json(t, &gc)
	for _, res := range gc.Results {
		if res.Plugin == "generic-tty" && (len(res.Freed) != 1 || res.Freed[0] != "pod-c") {
			t.Fatalf("gc: %s", r.stdout)
		}
	}
	if r.status != 0 || gc.freed() != 1 {
		t.Fatalf("gc: %s", r.stdout)
	}
	if r := n.ctl("gc"); r.status != 2 {
		t.Fatalf("gc without a valid list: %d", r.status)
	}
	// DEL across plugins, then nothing is held.
	r = n.ctl("del", "--id", "pod-a")
	var del struct {
		Results []struct {
			Freed bool
			Error any
		}
	}
	r.json(t, &del)
	if r.status != 0 || len(del.Results) != 2 || !del.Results[0].Freed || !del.Results[1].Freed {
		t.Fatalf("del: %s", r.stdout)
	}
	r = n.ctl("ls")
	r.json(t, &ls)
	if len(ls.Allocations) != 0 {
		t.Fatalf("ls after del: %s", r.stdout)
	}
	if r := n.ctl("del", "--id", "pod-a"); r.status != 0 {
		t.Fatalf("second del: %d", r.status)
	}
	for _, args := range [][]string{{"del"}, {"add", "gpu:1"}, {"add", "--id", "-x", "gpu:1"}, {"add", "--id", "x", "gpu:0"}, {"bogus"}} {
		if r := n.ctl(args...); r.status != 2 {
			t.Errorf("%v: status %d, want 2", args, r.status)
		}
	}
}

// A plugin that hangs is reported as a timeout, and a plugin missing from
// CDI_PATH as such; both name the config file.
func TestCdictlBrokenPlugins(t *testing.T) {
	confs := map[string]string{
		"hang.d/hang.conf":       `{"cdiVersion":"0.0.2","name":"h","type":"hang","plugin":"hang"}`,
		"ghost.d/ghost.conf":     `{"cdiVersion":"0.0.2","name":"g","type":"ghost","plugin":"not-installed"}`,
		"tty.d/generic-tty.conf": ctlConfs["tty.d/generic-tty.conf"],
	}
	n := newCtlNode(t, ctlHost(), confs)
	n.script("hang", `if [ "$CDI_COMMAND" = VERSION ]; then echo '{"cdiVersion":"0.0.2","supportedVersions":["0.0.2"]}'; exit 0; fi; exec sleep 600`)
	r := n.ctl("info", "--timeout", "500ms")
	if r.status != 1 || !strings.Contains(r.stderr, "hang.conf") || !strings.Contains(r.stderr, "timeout") {
		t.Fatalf("hang: %d\n%s", r.status, r.stderr)
	}
	if !strings.Contains(r.stderr, "ghost.conf") || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("missing plugin: %s", r.stderr)
	}
	var caps map[string]any
	r.json(t, &caps)
	if caps["tty"] != float64(7) {
		t.Fatalf("healthy plugin not reported: %s", r.stdout)
	}
	// ADD through the hanging plugin fails as a timeout and rolls back the tty.
	r = n.ctl("add", "--id", "p", "--timeout", "500ms", "tty:1,hang:1")
	if r.status != 1 || !strings.Contains(r.stdout, "timeout") {
		t.Fatalf("add: %d %s %s", r.status, r.stdout, r.stderr)
	}
	if recs := n.records("generic-tty"); len(recs) != 0 {
		t.Fatalf("tty not rolled back: %v", recs)
	}
	// DEL reports the broken plugins, naming them, and exits 1.
	if r := n.ctl("del", "--id", "p", "--timeout", "500ms"); r.status != 1 || !strings.Contains(r.stderr, "hang.conf") || !strings.Contains(r.stderr, "ghost.conf") {
		t.Fatalf("del: %d %s", r.status, r.stderr)
	}
}

// The demo's configs in demo/conf/ on the bundled demo host: what `make
// demo` shows, including the sriov → drm chain on the pre-partitioned PF.
func TestBundledConfigsOnDemoHost(t *testing.T) {
	n := demoNode(t, "../../demo/conf")
	r := n.ctl("info")
	var caps map[string]any
	r.json(t, &caps)
	if r.status != 0 || caps["gpu"] != float64(4) || caps["tty"] != float64(51) || caps["vgpu"] != float64(4) {
		t.Fatalf("info: %s %s", r.stdout, r.stderr)
	}
	r = n.ctl("add", "--id", "demo", "gpu:1,vgpu:2,tty:1")
	var add struct{ Devices []string }
	r.json(t, &add)
	want := "/dev/dri/card0 /dev/dri/renderD128 /dev/dri/renderD134 /dev/dri/renderD135 /dev/tty13"
	if r.status != 0 || strings.Join(add.Devices, " ") != want {
		t.Fatalf("add: %s %s", r.stdout, r.stderr)
	}
	if r := n.ctl("del", "--id", "demo"); r.status != 0 {
		t.Fatal(r.stdout)
	}
	for _, p := range []string{"drm", "sriov", "generic-tty"} {
		if recs := n.records(p); len(recs) != 0 {
			t.Errorf("%s still holds %v", p, recs)
		}
	}
}

// cdictl devices: what each plugin sees, with ids, names when pci.ids is
// installed (ids only, said once, when it is not), usability and holders.
func TestCdictlDevices(t *testing.T) {
	h := eightGPUs()
	h.TTYs = map[string]int{"tty": 16}
	confs := map[string]string{
		"gpu.d/drm.conf":         `{"cdiVersion":"0.0.2","name":"g","type":"gpu","plugin":"drm","args":{"vendorid_whitelist":["0x10de"]}}`,
		"tty.d/generic-tty.conf": ctlConfs["tty.d/generic-tty.conf"],
	}
	n := newCtlNode(t, h, confs)
	if r := n.ctl("add", "--id", "held", "gpu:1,tty:1"); r.status != 0 {
		t.Fatal(r.stdout)
	}
	type dev struct {
		Key, Reason, HeldBy, VendorID, Vendor, Product string
		Usable                                         bool
		Nodes                                          []string
	}
	var out struct {
		Plugins []struct {
			Plugin  string
			Devices []dev
		}
	}
	r := n.ctl("devices")
	r.json(t, &out)
	if r.status != 0 || len(out.Plugins) != 2 || strings.Count(r.stderr, "no PCI ids database") != 1 {
		t.Fatalf("devices: %d %s\n%s", r.status, r.stdout, r.stderr)
	}
	gpus := out.Plugins[0].Devices
	if len(gpus) != 8 || gpus[0].HeldBy != "held" || !gpus[1].Usable || gpus[4].Usable ||
		gpus[4].Reason != "vendor not in vendorid_whitelist" || gpus[0].VendorID != "0x10de" || gpus[0].Vendor != "" {
		t.Fatalf("gpus: %+v", gpus)
	}
	ttys := out.Plugins[1].Devices
	if len(ttys) != 16 || ttys[0].Usable || ttys[5].Reason != "reserved (num_system_reserved)" || ttys[13].HeldBy != "held" || !ttys[14].Usable {
		t.Fatalf("ttys: %+v", ttys)
	}
	// With a PCI ids database on the host, names appear.
	ids := filepath.Join(n.root, "usr/share/hwdata/pci.ids")
	if err := os.MkdirAll(filepath.Dir(ids), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ids, []byte("# test\n10de  NVIDIA Corporation\n\t1111  Test GPU\n1002  Advanced Micro Devices, Inc. [AMD/ATI]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = n.ctl("devices", "gpu")
	out.Plugins = nil
	r.json(t, &out)
	if d := out.Plugins[0].Devices; d[0].Vendor != "NVIDIA Corporation" || d[0].Product != "Test GPU" || d[5].Vendor != "Advanced Micro Devices, Inc. [AMD/ATI]" {
		t.Fatalf("names: %+v", d)
	}
	if strings.Contains(r.stderr, "no PCI ids database") {
		t.Fatalf("database reported missing: %s", r.stderr)
	}
}

// A plugin that only speaks 0.0.1 is called with CDI_VERSION=0.0.1.
func TestCdictlNegotiatesOlderVersion(t *testing.T) {
	n := newCtlNode(t, fixture.Host{}, map[string]string{
		"old.d/old.conf": `{"cdiVersion":"0.0.1","name":"o","type":"old","plugin":"old"}`,
	})
	n.script("old", `cat >/dev/null
case "$CDI_COMMAND" in
VERSION) echo '{"cdiVersion":"0.0.1","supportedVersions":["0.0.1"]}' ;;
INFO) [ "$CDI_VERSION" = 0.0.1 ] || { echo '{"cdiVersion":"0.0.1","code":1,"msg":"Incompatible CDI version"}'; exit 1; }
      echo '{"cdiVersion":"0.0.1","old":3}' ;;
esac`)
	var v struct {
		Plugins []struct {
			Negotiated string
			Compatible bool
		}
	}
	r := n.ctl("version")
	r.json(t, &v)
	if len(v.Plugins) != 1 || v.Plugins[0].Negotiated != "0.0.1" || v.Plugins[0].Compatible {
		t.Fatalf("version: %s", r.stdout)
	}
	var caps map[string]any
	r = n.ctl("info")
	r.json(t, &caps)
	if r.status != 0 || caps["old"] != float64(3) {
		t.Fatalf("info: %s %s", r.stdout, r.stderr)
	}
}
