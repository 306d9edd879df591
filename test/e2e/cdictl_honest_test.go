package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// lsOut is the JSON of `cdictl ls`.
type lsOut struct {
	Allocations []struct {
		RequestID  string
		Plugin     string
		Type       string
		Spec       string
		Devices    []string
		CDIDevices []string `json:"cdiDevices"`
		Delegate   string
		DelegateOf string `json:"delegateOf"`
	}
	Errors []struct {
		Store   string
		Code    int
		Details string
	}
}

// A state directory or store that cannot be read is an error (code 106,
// exit 1), never an empty listing; readable stores are still listed.
func TestCdictlLsUnreadableStore(t *testing.T) {
	n := newCtlNode(t, ctlHost(), ctlConfs)
	if r := n.ctl("add", "--id", "pod-a", "tty:1"); r.status != 0 {
		t.Fatalf("add: %s %s", r.stdout, r.stderr)
	}
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := n.ctl("ls", "--state-dir", notDir)
	var out lsOut
	r.json(t, &out)
	if r.status != 1 || len(out.Errors) != 1 || out.Errors[0].Code != 106 || !strings.Contains(r.stderr, notDir) {
		t.Fatalf("state dir is a file: %d %s\n%s", r.status, r.stdout, r.stderr)
	}
	// A damaged store beside a good one.
	bad := filepath.Join(n.state, "broken.db")
	if err := os.WriteFile(bad, []byte("not a bbolt file, but long enough to be read as one"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = n.ctl("ls")
	out = lsOut{}
	r.json(t, &out)
	if r.status != 1 || len(out.Allocations) != 1 || out.Allocations[0].RequestID != "pod-a" ||
		len(out.Errors) != 1 || out.Errors[0].Code != 106 || out.Errors[0].Store != bad {
		t.Fatalf("broken store: %d %s\n%s", r.status, r.stdout, r.stderr)
	}
	if r := n.ctl("ls", "-o", "table"); r.status != 1 || !strings.Contains(r.stdout, "pod-a") || !strings.Contains(r.stderr, bad) {
		t.Fatalf("broken store, table: %d %s\n%s", r.status, r.stdout, r.stderr)
	}
}

// ls as an unprivileged user, against a root-owned state directory and
// store: the permission error is reported with code 106 and exit 1.
func TestCdictlLsAsNonRoot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the test runs cdictl as uid 65534 against a store root owns, which only root can set up")
	}
	n := newCtlNode(t, ctlHost(), ctlConfs)
	if r := n.ctl("add", "--id", "pod-a", "tty:1"); r.status != 0 {
		t.Fatalf("add: %s %s", r.stdout, r.stderr)
	}
	bin := nobodyCopy(t, "cdictl")
	// The state directory as plugins create it (0700, root) and, second,
	// opened up: the directory is still root's, which a store reader of
	// another user refuses (docs/reliability.md).
	for _, tc := range []struct {
		name, want string
		open       []string // directories made 0755 first
	}{
		{"state dir", "permission denied", nil},
		{"owner", "owned by uid 0, not by uid 65534", []string{filepath.Dir(filepath.Dir(n.state)), filepath.Dir(n.state), n.state}},
	} {
		for _, d := range tc.open {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(bin, "ls", "--state-dir", n.state)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		r := run(t, cmd, "", []string{"PATH=/usr/bin:/bin", "CDI_CONF_DIR=" + filepath.Dir(bin)})
		var out lsOut
		r.json(t, &out)
		if r.status != 1 || len(out.Allocations) != 0 || len(out.Errors) != 1 || out.Errors[0].Code != 106 ||
			!strings.Contains(out.Errors[0].Details, tc.want) || !strings.Contains(r.stderr, tc.want) {
			t.Fatalf("%s: %d %s\n%s", tc.name, r.status, r.stdout, r.stderr)
		}
	}
}

// --state-dir reaches the plugins as CDI_STATE_DIR for every command, so
// add, ls, devices and del all see the same store.
func TestCdictlStateDirFlag(t *testing.T) {
	n := newCtlNode(t, ctlHost(), ctlConfs)
	other := filepath.Join(t.TempDir(), "other")
	if r := n.ctl("add", "--state-dir", other, "--id", "pod-s", "tty:1"); r.status != 0 {
		t.Fatalf("add: %s %s", r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(n.state, "generic-tty.db")); err == nil {
		t.Fatalf("add --state-dir %s wrote to CDI_STATE_DIR %s", other, n.state)
	}
	var ls lsOut
	r := n.ctl("ls", "--state-dir", other)
	r.json(t, &ls)
	if r.status != 0 || len(ls.Allocations) != 1 || ls.Allocations[0].RequestID != "pod-s" {
		t.Fatalf("ls: %s %s", r.stdout, r.stderr)
	}
	var devs struct {
		Plugins []struct {
			Devices []struct{ Key, HeldBy string }
		}
	}
	r = n.ctl("devices", "--state-dir", other, "tty")
	r.json(t, &devs)
	if r.status != 0 || devs.Plugins[0].Devices[13].HeldBy != "pod-s" {
		t.Fatalf("devices: %s %s", r.stdout, r.stderr)
	}
	var del struct{ Results []struct{ Freed bool } }
	r = n.ctl("del", "--state-dir", other, "--id", "pod-s")
	r.json(t, &del)
	if r.status != 0 || len(del.Results) != 2 || !del.Results[1].Freed {
		t.Fatalf("del: %s %s", r.stdout, r.stderr)
	}
}

// A plugin without an inventory (code 3 to DEVICES) is shown as such, and
// `devices` still exits 0: with a script plugin and with the bundled
// configs on the demo host.
func TestCdictlDevicesNoInventory(t *testing.T) {
	n := newCtlNode(t, ctlHost(), map[string]string{
		"tty.d/generic-tty.conf": ctlConfs["tty.d/generic-tty.conf"],
		"thing.d/plain.conf":     `{"cdiVersion":"0.0.2","name":"p","type":"thing","plugin":"plain"}`,
	})
	n.script("plain", `cat >/dev/null
case "$CDI_COMMAND" in
VERSION) echo '{"cdiVersion":"0.0.2","supportedVersions":["0.0.1","0.0.2"]}' ;;
*) echo '{"cdiVersion":"0.0.2","code":3,"msg":"Unsupported command"}'; exit 1 ;;
esac`)
	var out struct {
		Plugins []struct {
			Plugin      string
			NoInventory bool `json:"noInventory"`
			Error       any
			Devices     []any
		}
	}
	r := n.ctl("devices")
	r.json(t, &out)
	if r.status != 0 || len(out.Plugins) != 2 || !out.Plugins[0].NoInventory || out.Plugins[0].Error != nil ||
		out.Plugins[1].NoInventory || len(out.Plugins[1].Devices) != 20 {
		t.Fatalf("devices: %d %s\n%s", r.status, r.stdout, r.stderr)
	}
	if r := n.ctl("devices", "-o", "table", "thing"); r.status != 0 || !strings.Contains(r.stdout, "no inventory") {
		t.Fatalf("table: %d %s\n%s", r.status, r.stdout, r.stderr)
	}

	demo := demoNode(t, "../../conf")
	if r := demo.ctl("devices"); r.status != 0 {
		t.Fatalf("devices with the bundled configs: %d %s\n%s", r.status, r.stdout, r.stderr)
	}
}

// A type without a usable config, or no config at all, is an error that
// names the files searched, for every command that takes a type.
func TestCdictlUnknownType(t *testing.T) {
	n := newCtlNode(t, ctlHost(), ctlConfs)
	empty := t.TempDir()
	for _, tc := range []struct {
		args []string
		path string // the full path the error must name
	}{
		{[]string{"info", "nope"}, filepath.Join(n.conf, "nope.d/*.conf")},
		{[]string{"version", "nope"}, filepath.Join(n.conf, "nope.d/*.conf")},
		{[]string{"devices", "nope"}, filepath.Join(n.conf, "nope.d/*.conf")},
		{[]string{"add", "--id", "x", "TTY:1"}, filepath.Join(n.conf, "TTY.d/*.conf")},
		{[]string{"add", "--id", "x", "tty:1,nope:1"}, filepath.Join(n.conf, "nope.d/*.conf")},
		{[]string{"info", "--conf-dir", empty}, filepath.Join(empty, "*.d/*.conf")},
		{[]string{"del", "--conf-dir", empty, "--id", "x"}, filepath.Join(empty, "*.d/*.conf")},
	} {
		r := n.ctl(tc.args...)
		var e struct {
			Code    int
			Details string
		}
		r.json(t, &e)
		if r.status != 1 || e.Code != 4 || !strings.Contains(e.Details, tc.path) || !strings.Contains(r.stderr, tc.path) {
			t.Errorf("%v: %d %s\n%s", tc.args, r.status, r.stdout, r.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(n.state, "generic-tty.db")); err == nil {
		if recs := n.records("generic-tty"); len(recs) != 0 {
			t.Fatalf("a failed add left %v", recs)
		}
	}
}

// JSON output keeps <, > and & as they are.
func TestCdictlJSONNotEscaped(t *testing.T) {
	n := newCtlNode(t, fixture.Host{}, map[string]string{
		"thing.d/esc.conf": `{"cdiVersion":"0.0.2","name":"e","type":"thing","plugin":"esc"}`,
	})
	n.script("esc", `cat >/dev/null
case "$CDI_COMMAND" in
VERSION) echo '{"cdiVersion":"0.0.2","supportedVersions":["0.0.2"]}' ;;
*) echo '{"cdiVersion":"0.0.2","code":100,"msg":"Internal error","details":"want <a> & <b>"}'; exit 1 ;;
esac`)
	for _, args := range [][]string{{"add", "--id", "x", "thing:1"}, {"del", "--id", "x"}, {"devices"}} {
		r := n.ctl(args...)
		if !strings.Contains(r.stdout, "want <a> & <b>") || strings.Contains(r.stdout, `\u003c`) {
			t.Errorf("%v: %s", args, r.stdout)
		}
	}
}

// ls names the CDI devices each allocation published (cdi_spec), and only
// those whose spec file exists.
func TestCdictlLsCDIDevices(t *testing.T) {
	specDir := filepath.Join(t.TempDir(), "cdi")
	n := newCtlNode(t, ctlHost(), map[string]string{
		"gpu.d/drm.conf":         ctlConfs["gpu.d/drm.conf"],
		"tty.d/generic-tty.conf": `{"cdiVersion":"0.0.2","name":"t","type":"tty","plugin":"generic-tty","args":{"num_system_reserved":12,"cdi_spec":{"kind":"cdictl-ls.test/tty","dir":"` + specDir + `"}}}`,
	})
	if r := n.ctl("add", "--id", "job-", "gpu:1,tty:1"); r.status != 0 {
		t.Fatalf("add: %s %s", r.stdout, r.stderr)
	}
	var ls lsOut
	r := n.ctl("ls")
	r.json(t, &ls)
	got := map[string]string{}
	for _, a := range ls.Allocations {
		got[a.Plugin] = strings.Join(a.CDIDevices, " ")
		if a.CDIDevices == nil {
			t.Errorf("%s: cdiDevices is not a list: %s", a.Plugin, r.stdout)
		}
	}
	if r.status != 0 || got["generic-tty"] != "cdictl-ls.test/tty=job-_0" || got["drm"] != "" {
		t.Fatalf("ls: %v\n%s", got, r.stdout)
	}
	if r := n.ctl("ls", "-o", "table"); !strings.Contains(r.stdout, "cdictl-ls.test/tty=job-_0") {
		t.Fatalf("table: %s", r.stdout)
	}
	// A spec file that is gone is not claimed.
	if err := os.Remove(filepath.Join(specDir, "cdictl-ls.test-tty_job-_generic-tty-"+n.storeID("generic-tty")+".json")); err != nil {
		t.Fatal(err)
	}
	ls = lsOut{}
	n.ctl("ls").json(t, &ls)
	for _, a := range ls.Allocations {
		if len(a.CDIDevices) != 0 {
			t.Fatalf("names a spec that does not exist: %+v", a)
		}
	}
}

// devices shows what the plugins' DEVICES answers say, ids included;
// cdictl reads no sysfs itself (the host here has none).
func TestCdictlDevicesFromAnswers(t *testing.T) {
	n := newCtlNode(t, fixture.Host{}, map[string]string{
		"thing.d/inv.conf": `{"cdiVersion":"0.0.2","name":"i","type":"thing","plugin":"inv"}`,
	})
	n.script("inv", `cat >/dev/null
case "$CDI_COMMAND" in
VERSION) echo '{"cdiVersion":"0.0.2","supportedVersions":["0.0.2"]}' ;;
DEVICES) echo '{"cdiVersion":"0.0.2","devices":[{"key":"0000:42:00.0","nodes":["/dev/x"],"numa":-1,"usable":true,"vendorId":"0x10de","deviceId":"0x1111"}]}' ;;
esac`)
	var out struct {
		Plugins []struct {
			Devices []struct{ Key, VendorID, DeviceID string }
		}
	}
	r := n.ctl("devices")
	r.json(t, &out)
	if r.status != 0 || len(out.Plugins) != 1 || len(out.Plugins[0].Devices) != 1 ||
		out.Plugins[0].Devices[0].VendorID != "0x10de" || out.Plugins[0].Devices[0].DeviceID != "0x1111" {
		t.Fatalf("devices: %d %s\n%s", r.status, r.stdout, r.stderr)
	}
}
