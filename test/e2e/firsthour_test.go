package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// liveState is the node's live state directory, which no test may touch.
const liveState = "/var/lib/cdi"

// statLive describes the live state directory, to check that a test left
// it as it was: absent, or there with the same modification time.
func statLive(t *testing.T) string {
	t.Helper()
	fi, err := os.Stat(liveState)
	if err != nil {
		return "absent"
	}
	return fi.ModTime().String()
}

// A misspelt CDI_* variable is named with the one meant, by cdictl and by
// a plugin; a misspelt CDI_STATE_DIR says that the live /var/lib/cdi is
// the state directory. The commands stop before any store is opened, so
// the live directory is never touched.
func TestMisspeltVariablesWarn(t *testing.T) {
	n := newCtlNode(t, ctlHost(), ctlConfs)
	before := statLive(t)
	base := []string{"CDI_HOST_ROOT=" + n.root, "CDI_PATH=" + binDir, "PATH=" + os.Getenv("PATH")}
	missing := filepath.Join(t.TempDir(), "none")

	// cdictl, with the state directory misspelt and no config directory:
	// it fails on the configs, before any plugin or store.
	r := runArgs(t, filepath.Join(binDir, "cdictl"), []string{"info", "-o", "table"},
		append(base, "CDI_STAT_DIR="+n.state, "CDI_CONF_DIR="+missing, "CDI_PATHS=/x"))
	for _, want := range []string{
		"cdictl: warning: CDI_STAT_DIR is set, but no program of the suite reads it: did you mean CDI_STATE_DIR? CDI_STATE_DIR is not set, so the state directory is the node's own /var/lib/cdi",
		"cdictl: warning: CDI_PATHS is set, but no program of the suite reads it: did you mean CDI_PATH?",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("cdictl: stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	// --state-dir is the state directory: no word of the live one.
	r = runArgs(t, filepath.Join(binDir, "cdictl"), []string{"info", "--state-dir", n.state},
		append(base, "CDI_STAT_DIR="+n.state, "CDI_CONF_DIR="+missing))
	if !strings.Contains(r.stderr, "did you mean CDI_STATE_DIR?") || strings.Contains(r.stderr, "/var/lib/cdi") {
		t.Errorf("cdictl --state-dir: %s", r.stderr)
	}

	// A plugin, with a relative host root so that it stops (code 101)
	// right after reading its environment.
	conf := ctlConfs["tty.d/generic-tty.conf"]
	r = runPlugin(t, "generic-tty", conf, []string{"CDI_COMMAND=INFO", "CDI_HOST_ROOT=relative", "CDI_STATEDIR=" + n.state, "CDI_REQUESTID=1"})
	for _, want := range []string{
		"generic-tty: warning: CDI_STATEDIR is set, but no program of the suite reads it: did you mean CDI_STATE_DIR? CDI_STATE_DIR is not set, so the state directory is the node's own /var/lib/cdi",
		"generic-tty: warning: CDI_REQUESTID is set, but no program of the suite reads it: did you mean CDI_REQUEST_ID?",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("plugin: stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if r.status == 0 {
		t.Errorf("plugin with a relative host root succeeded: %s", r.stdout)
	}
	// Set right, nothing is said.
	r = runPlugin(t, "generic-tty", conf, []string{"CDI_COMMAND=INFO", "CDI_HOST_ROOT=" + n.root, "CDI_STATE_DIR=" + n.state, "CDI_TEST_BIN_DIR=/x"})
	if r.status != 0 || r.stderr != "" {
		t.Errorf("plugin, variables right: %d %q", r.status, r.stderr)
	}
	if after := statLive(t); after != before {
		t.Fatalf("%s changed: %s, then %s", liveState, before, after)
	}
}

// runPlugin runs a plugin binary with exactly env and the config on stdin.
func runPlugin(t *testing.T, plugin, conf string, env []string) result {
	t.Helper()
	return runBin(t, filepath.Join(binDir, plugin), conf, env)
}

// A config directory that is not there is named with the two ways to fix
// it, not "resource-spec unsupported"; a plugin that is not found names
// CDI_PATH.
func TestMissingConfigDirAndPlugin(t *testing.T) {
	n := newCtlNode(t, ctlHost(), ctlConfs)
	missing := filepath.Join(t.TempDir(), "none")
	r := n.ctl("info", "--conf-dir", missing)
	var e struct {
		Code         int
		Msg, Details string
	}
	r.json(t, &e)
	want := "config directory " + missing + " does not exist: install the shipped configs there (make install-conf, or the .deb), or set CDI_CONF_DIR (or --conf-dir) to a directory of <type>.d/*.conf"
	if r.status != 1 || e.Code != 101 || e.Details != want || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "resource-spec unsupported") {
		t.Errorf("missing config dir: %d %s\n%s", r.status, r.stdout, r.stderr)
	}
	r = n.ctl("info", "-o", "table", "--path", missing)
	if !strings.Contains(r.stderr, `plugin not found: "drm" in `+missing+" (the search path, CDI_PATH)") {
		t.Errorf("plugin not found: %s", r.stderr)
	}
}

// make demo KEEP=1 keeps the demo host and prints the environment to go
// on with it: cdictl info works with exactly that environment. Without
// KEEP nothing is left behind.
func TestDemoKeep(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("the demo builds mkhost with go, which is not on PATH: %v", err)
	}
	tmp := t.TempDir()
	demo := func(keep string) result {
		t.Helper()
		cmd := exec.Command("../../scripts/demo.sh")
		return run(t, cmd, "", append(os.Environ(), "KEEP="+keep, "BIN="+binDir, "TMPDIR="+tmp))
	}
	r := demo("")
	if r.status != 0 {
		t.Fatalf("demo: %d\n%s\n%s", r.status, r.stdout, r.stderr)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("the demo left %v in TMPDIR", left)
	}
	checkDemoOutput(t, r.stdout)
	r = demo("1")
	if r.status != 0 {
		t.Fatalf("demo KEEP=1: %d\n%s\n%s", r.status, r.stdout, r.stderr)
	}
	var export string
	for line := range strings.Lines(r.stdout) {
		if rest, ok := strings.CutPrefix(line, "export "); ok {
			export = strings.TrimSpace(rest)
		}
	}
	if export == "" || !strings.Contains(r.stdout, "Remove them with: rm -rf '"+tmp) {
		t.Fatalf("demo KEEP=1 printed no environment:\n%s", r.stdout)
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, kv := range strings.Fields(export) {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, k+"="+strings.Trim(v, "'"))
	}
	for _, k := range []string{"CDI_HOST_ROOT=" + tmp, "CDI_CONF_DIR=", "CDI_PATH=" + binDir, "CDI_STATE_DIR=" + tmp} {
		if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k) }) {
			t.Errorf("environment %v lacks %s", env, k)
		}
	}
	r = runArgs(t, filepath.Join(binDir, "cdictl"), []string{"info", "-o", "table"}, env)
	if r.status != 0 || r.stderr != "" ||
		!strings.Contains(r.stdout, "gpu       4         drm") || !strings.Contains(r.stdout, "vgpu      4         sriov") {
		t.Errorf("cdictl info in the kept demo: %d\n%s\n%s", r.status, r.stdout, r.stderr)
	}
}

// checkDemoOutput checks what make demo prints: each command line is
// one that runs from the repository's top directory (the binaries and
// configs it names are there, none of an installed node's); cdictl's
// --numa 1 gets node 1, which the plugin steps freed first; the generic
// plugin's kvm shares fill up and its serial rule picks the adapter of
// that serial.
func checkDemoOutput(t *testing.T, out string) {
	t.Helper()
	var commands []string
	for line := range strings.Lines(out) {
		if cmd, ok := strings.CutPrefix(strings.TrimSpace(line), "$ "); ok {
			commands = append(commands, cmd)
		}
	}
	if len(commands) < 40 {
		t.Fatalf("the demo printed %d command lines:\n%s", len(commands), out)
	}
	for _, cmd := range commands {
		if strings.Contains(cmd, "/opt/cdi") || strings.Contains(cmd, "/etc/cdi") {
			t.Errorf("the demo prints %q, which is not what it runs", cmd)
		}
		if strings.HasPrefix(cmd, "export ") {
			continue
		}
		var named []string // the binary, and the config after <
		fields := strings.Fields(cmd)
		for i, f := range fields {
			if !strings.Contains(f, "=") && len(named) == 0 {
				named = append(named, f)
			}
			if f == "<" && i+1 < len(fields) {
				named = append(named, fields[i+1])
			}
		}
		for _, p := range named {
			if !filepath.IsAbs(p) {
				p = filepath.Join("../..", p)
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("the demo's command %q names a file that is not there: %v", cmd, err)
			}
		}
	}
	// The demo names the binaries relative to the top directory when
	// they are in it.
	bin := binDir
	if root, err := filepath.Abs("../.."); err == nil {
		if rel, ok := strings.CutPrefix(binDir, root+"/"); ok {
			bin = rel
		}
	}
	for _, want := range []string{
		"$ " + bin + "/cdictl add --id pod-a --numa 1 gpu:1,tty:2,vgpu:1\n{\n  \"cdiVersion\": \"0.0.2\",\n  \"devices\": [\n    \"/dev/dri/card2\",",
		"\"numa_locality\": [\n    1\n  ]\n}\nExit status: 0\n",
		"CDI_REQUEST_ID=sandbox-3 " + bin + "/generic < demo/generic-conf/kvm.d/generic-kvm.conf\n{\n  \"cdiVersion\": \"0.0.2\",\n  \"code\": 103,",
		"CDI_REQUEST_ID=flasher " + bin + "/generic < demo/generic-conf/usbserial.d/generic-serial.conf\n{\n  \"cdiVersion\": \"0.0.2\",\n  \"devices\": [\n    \"/dev/ttyUSB1\"\n  ]",
		"usbserial  generic  1a86:7523:B71234XY  /dev/ttyUSB1",
		"kvm        generic  kvm                 /dev/kvm      -          -     -     -       2 of 2 shares held by ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
}

// cdictl's wording: gc --dry-run heads its column WOULD FREE, validate
// counts "1 problem", contradicting flags are refused in our words, and a
// type or an arg given in another case or misspelt is named with the one
// meant.
func TestCdictlWording(t *testing.T) {
	confs := map[string]string{
		"gpu.d/drm.conf":         ctlConfs["gpu.d/drm.conf"],
		"tty.d/generic-tty.conf": ctlConfs["tty.d/generic-tty.conf"],
	}
	n := newCtlNode(t, ctlHost(), confs)
	if r := n.ctl("add", "--id", "pod-a", "tty:1"); r.status != 0 {
		t.Fatalf("add: %d %s", r.status, r.stderr)
	}
	r := n.ctl("gc", "--dry-run", "--none-valid", "-o", "table")
	if head, _, _ := strings.Cut(r.stdout, "\n"); r.status != 0 || !strings.HasSuffix(strings.TrimSpace(head), "WOULD FREE") {
		t.Errorf("gc --dry-run -o table: %d %q", r.status, r.stdout)
	}
	r = n.ctl("gc", "--none-valid", "-o", "table")
	if head, _, _ := strings.Cut(r.stdout, "\n"); r.status != 0 || !strings.HasSuffix(strings.TrimSpace(head), "FREED") || strings.Contains(head, "WOULD") {
		t.Errorf("gc -o table: %d %q", r.status, r.stdout)
	}

	r = n.ctl("gc", "--valid", "x", "--none-valid")
	if want := "cdictl gc: --none-valid and --valid cannot be given together: give one of them\n"; r.status != 2 || !strings.HasPrefix(r.stderr, want) {
		t.Errorf("gc --valid --none-valid: %d %q, want %q", r.status, r.stderr, want)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "--id", "x", "TTY:1"}, `no usable config for resource type "TTY": none in ` + filepath.Join(n.conf, "TTY.d/*.conf") + `; did you mean "tty"?`},
		{[]string{"info", "gpus"}, `; did you mean "gpu"?`},
	} {
		r := n.ctl(tc.args...)
		if r.status != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %d %q, want %q", tc.args, r.status, r.stderr, tc.want)
		}
	}

	bad := newCtlNode(t, ctlHost(), map[string]string{
		"tty.d/generic-tty.conf": `{"cdiVersion":"0.0.2","name":"t","type":"tty","plugin":"generic-tty","args":{"num_system_reserve":12}}`,
	})
	r = bad.ctl("validate", "-o", "table")
	if r.status != 1 || !strings.Contains(r.stdout, `unknown field "num_system_reserve"; did you mean "num_system_reserved"?`) ||
		!strings.HasSuffix(r.stderr, "cdictl: 1 problem\n") {
		t.Errorf("validate: %d %q %q", r.status, r.stdout, r.stderr)
	}
}

// add shows each device's own CDI device (cdiKeyDevices); specs and
// validate --specs read the spec directories the configs name (cdi_spec),
// not only the CDI library's.
func TestCdictlSpecsOfTheConfigs(t *testing.T) {
	dir := t.TempDir()
	n := newCtlNode(t, ctlHost(), map[string]string{
		"tty.d/generic-tty.conf": `{"cdiVersion":"0.0.2","name":"t","type":"tty","plugin":"generic-tty","args":{"num_system_reserved":12,"cdi_spec":{"kind":"example.com/tty","dir":"` + dir + `"}}}`,
	})
	r := n.ctl("add", "--id", "pod-a", "tty:2")
	var added struct {
		Devices       []string
		CDIDevices    []string          `json:"cdiDevices"`
		CDIKeyDevices map[string]string `json:"cdiKeyDevices"`
	}
	r.json(t, &added)
	if r.status != 0 || len(added.CDIDevices) != 1 || len(added.CDIKeyDevices) != 2 {
		t.Fatalf("add: %d %s %s", r.status, r.stdout, r.stderr)
	}
	for key, name := range added.CDIKeyDevices {
		if !strings.HasPrefix(name, "example.com/tty=pod-a_") || !strings.Contains(name, key) {
			t.Errorf("cdiKeyDevices[%s] = %s", key, name)
		}
	}
	var specs struct {
		Devices []struct{ Name, Spec string }
	}
	r = n.ctl("specs")
	r.json(t, &specs)
	var names []string
	for _, d := range specs.Devices {
		if strings.HasPrefix(d.Spec, dir) {
			names = append(names, d.Name)
		}
	}
	if len(names) != 3 || !slices.Contains(names, added.CDIDevices[0]) {
		t.Errorf("specs lists %q of %s, want the request's and its two devices':\n%s", names, dir, r.stdout)
	}
	// --spec-dir is exactly the directories named.
	r = n.ctl("specs", "--spec-dir", t.TempDir())
	if r.status != 0 || strings.Contains(r.stdout, "example.com/tty") {
		t.Errorf("specs --spec-dir: %d %s", r.status, r.stdout)
	}
	// validate --specs reads the same directory: a broken spec there is
	// a problem.
	if err := os.WriteFile(filepath.Join(dir, "broken.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = n.ctl("validate", "--specs", "-o", "table")
	if r.status != 1 || !strings.Contains(r.stdout, filepath.Join(dir, "broken.json")) {
		t.Errorf("validate --specs: %d %s %s", r.status, r.stdout, r.stderr)
	}
}

// The shell completes values, as kubectl completes resource names: -o's
// formats, the node's types (add's SPEC:N list too), the request-ids its
// stores hold and its store files, through cobra's __complete, which the
// completion scripts call. A shell other than bash, zsh and fish is a
// usage error.
func TestCdictlCompletesValues(t *testing.T) {
	n := newCtlNode(t, ctlHost(), ctlConfs)
	for _, id := range []string{"pod-a", "pod-b"} {
		if r := n.ctl("add", "--id", id, "tty:1"); r.status != 0 {
			t.Fatalf("add: %s", r.stderr)
		}
	}
	complete := func(args ...string) []string {
		t.Helper()
		r := n.ctl(append([]string{"__complete"}, args...)...)
		if r.status != 0 {
			t.Fatalf("__complete %v: %d %s", args, r.status, r.stderr)
		}
		var out []string
		for line := range strings.Lines(r.stdout) {
			if line = strings.TrimSpace(line); !strings.HasPrefix(line, ":") {
				out = append(out, line)
			}
		}
		return out
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"ls", "-o", ""}, []string{"json", "yaml", "table", "wide"}},
		{[]string{"info", ""}, []string{"gpu", "tty"}},
		{[]string{"devices", "--conf-dir", t.TempDir(), ""}, nil},
		{[]string{"add", "--id", "x", "gpu:1,"}, []string{"gpu:1,gpu:", "gpu:1,tty:"}},
		{[]string{"del", "--id", ""}, []string{"pod-a", "pod-b"}},
		{[]string{"gc", "--valid", "pod-a,"}, []string{"pod-a,pod-b"}},
		{[]string{"check", ""}, []string{filepath.Join(n.state, "generic-tty.db")}},
	} {
		if got := complete(tc.args...); !slices.Equal(got, tc.want) {
			t.Errorf("__complete %v: %q, want %q", tc.args, got, tc.want)
		}
	}
	for _, args := range [][]string{{"completion", "powershell"}, {"completion"}} {
		if r := n.ctl(args...); r.status != 2 || r.stdout != "" || !strings.Contains(r.stderr, "bash, zsh") {
			t.Errorf("%v: %d %q %q", args, r.status, r.stdout, r.stderr)
		}
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		if r := n.ctl("completion", sh); r.status != 0 || !strings.Contains(r.stdout, "__complete") {
			t.Errorf("completion %s: %d %.200s", sh, r.status, r.stderr)
		}
	}
}

// The state-directory modes docs/operations.md states are those enforced:
// made 0700 and 0600; 0755 and 0644 used as they are; a directory or store
// that group or others may write refused with code 106.
func TestStateModesAsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a directory of 0755 and a store of\n0644 are used as they are", "while 0775, 0757 or 0666 are refused", "makes a missing state directory 0700 and its\nstore 0600"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/operations.md no longer says %q", want)
		}
	}
	n := newCtlNode(t, ctlHost(), ctlConfs)
	add := func(id string) result {
		t.Helper()
		return n.ctl("add", "--id", id, "tty:1")
	}
	if r := add("a"); r.status != 0 {
		t.Fatalf("add: %s", r.stderr)
	}
	store := filepath.Join(n.state, "generic-tty.db")
	for path, want := range map[string]os.FileMode{n.state: 0o700 | os.ModeDir, store: 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != want {
			t.Errorf("%s: %v %v, want %v", path, fi.Mode(), err, want)
		}
	}
	for _, tc := range []struct {
		dir, file os.FileMode
		ok        bool
	}{
		{0o755, 0o644, true},
		{0o775, 0o600, false},
		{0o757, 0o600, false},
		{0o700, 0o666, false},
		{0o700, 0o620, false},
		{0o700, 0o600, true},
	} {
		if err := os.Chmod(n.state, tc.dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(store, tc.file); err != nil {
			t.Fatal(err)
		}
		r := add(fmt.Sprintf("m%o-%o", tc.dir, tc.file))
		var e struct{ Code int }
		if !tc.ok {
			r.json(t, &e)
		}
		if ok := r.status == 0; ok != tc.ok || !tc.ok && (e.Code != 106 || !strings.Contains(r.stderr, "writable by its group or others")) {
			t.Errorf("dir %04o, store %04o: %d %s %s", tc.dir, tc.file, r.status, r.stdout, r.stderr)
		}
	}
}
