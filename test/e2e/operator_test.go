package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// The operator's view of cdictl (issue 27): no silent failures, and the
// command-line conventions of kubectl and helm.

// demoNode is the bundled demo host with the configs in conf, a directory
// of the repository ("../../demo/conf": gpu (drm), tty (generic-tty) and
// vgpu (sriov chain-loading drm)).
func demoNode(t *testing.T, conf string) *ctlNode {
	t.Helper()
	h, err := fixture.Load("../../demo/host.json")
	if err != nil {
		t.Fatal(err)
	}
	n := &ctlNode{node: newNode(t, h), scripts: t.TempDir()}
	if n.conf, err = filepath.Abs(conf); err != nil {
		t.Fatal(err)
	}
	return n
}

// lsRows returns "requestId plugin spec:amount" for every allocation ls
// lists.
func (n *ctlNode) lsRows() []string {
	n.t.Helper()
	r := n.ctl("ls")
	var out lsOut
	r.json(n.t, &out)
	if r.status != 0 {
		n.t.Fatalf("ls: %d %s %s", r.status, r.stdout, r.stderr)
	}
	var rows []string
	for _, a := range out.Allocations {
		rows = append(rows, a.RequestID+" "+a.Plugin+" "+a.Spec)
	}
	return rows
}

// A failed add frees only what that call added: what the request-id held
// before (a replay of it adds nothing) is kept, and a request that could
// not be rolled back exactly is refused before any plugin runs.
func TestCdictlAddRollbackKeepsEarlierHoldings(t *testing.T) {
	n := demoNode(t, "../../demo/conf")
	for _, req := range []string{"tty:1", "gpu:1"} {
		if r := n.ctl("add", "--id", "pod-a", req); r.status != 0 {
			t.Fatalf("add %s: %d %s %s", req, r.status, r.stdout, r.stderr)
		}
	}
	held := "pod-a drm gpu pod-a generic-tty tty"
	if got := strings.Join(n.lsRows(), " "); got != held {
		t.Fatalf("ls before: %s", got)
	}
	r := n.ctl("add", "--id", "pod-a", "tty:1,gpu:1,vgpu:99")
	if got := strings.Join(n.lsRows(), " "); got != held {
		t.Fatalf("the failed add freed what pod-a held: ls shows %q, want %q", got, held)
	}
	if r.status != 1 || r.code(t) != 103 || !strings.Contains(r.stderr, "kept: pod-a already held this in generic-tty") ||
		!strings.Contains(r.stderr, "kept: pod-a already held this in drm") {
		t.Fatalf("add with vgpu:99: %d %s %s", r.status, r.stdout, r.stderr)
	}

	// A fresh id: the tty this call added is rolled back.
	r = n.ctl("add", "--id", "pod-b", "tty:1,vgpu:99")
	if r.status != 1 || !strings.Contains(r.stderr, "rolled back: freed what this call added under pod-b in generic-tty") {
		t.Fatalf("add pod-b: %d %s %s", r.status, r.stdout, r.stderr)
	}
	if got := strings.Join(n.lsRows(), " "); got != held {
		t.Fatalf("after pod-b: %s", got)
	}

	// New amounts for two types the id already holds in their plugins: a
	// rollback would free the earlier ones, so nothing runs.
	r = n.ctl("add", "--id", "pod-a", "tty:2,gpu:2")
	if r.status != 1 || r.code(t) != 104 || !strings.Contains(r.stdout, "more than one new type") || !strings.Contains(r.stdout, "tty:1 in generic-tty") {
		t.Fatalf("add tty:2,gpu:2: %d %s %s", r.status, r.stdout, r.stderr)
	}
	if got := strings.Join(n.lsRows(), " "); got != held {
		t.Fatalf("after the refusal: %s", got)
	}
}

// del and gc exit 1 when a plugin reported an error, naming it; an id held
// nowhere is 0 with a note.
func TestCdictlDelGCExitStatus(t *testing.T) {
	n := demoNode(t, "../../demo/conf")
	if r := n.ctl("del", "--id", "nobody"); r.status != 0 || !strings.Contains(r.stderr, "no plugin held anything under nobody") {
		t.Errorf("del of an id held nowhere: %d %s", r.status, r.stderr)
	}
	if r := n.ctl("add", "--id", "pod-a", "gpu:1,tty:1"); r.status != 0 {
		t.Fatalf("add: %s %s", r.stdout, r.stderr)
	}
	// gc --dry-run lists and frees nothing.
	r := n.ctl("gc", "--dry-run", "--none-valid")
	var gc gcAnswer
	r.json(t, &gc)
	if r.status != 0 || !gc.DryRun || gc.freed() != 2 || len(n.lsRows()) != 2 {
		t.Fatalf("gc --dry-run: %d %s %s", r.status, r.stdout, r.stderr)
	}
	// Every store unreadable: a damaged file in place of each.
	for _, p := range []string{"drm", "generic-tty", "sriov"} {
		if err := os.WriteFile(filepath.Join(n.state, p+".db"), []byte("not a store"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"del", "--id", "x"}, {"gc", "--none-valid"}} {
		r := n.ctl(args...)
		if r.status != 1 {
			t.Errorf("%v with every store damaged: status %d, want 1\n%s", args, r.status, r.stderr)
		}
		for _, f := range []string{"gpu.d/drm.conf", "tty.d/generic-tty.conf", "vgpu.d/sriov.conf"} {
			if !strings.Contains(r.stderr, f) {
				t.Errorf("%v: stderr does not name %s:\n%s", args, f, r.stderr)
			}
		}
	}
}

// A config that cannot be used fails the command with its file, line and
// column; near misses of names and places are warned about; validate
// lists every problem, one per line.
func TestCdictlConfigProblems(t *testing.T) {
	n := newCtlNode(t, ctlHost(), map[string]string{
		"gpu.d/drm.conf":         ctlConfs["gpu.d/drm.conf"],
		"gpu.d/20-drm.json":      ctlConfs["gpu.d/drm.conf"],
		"tty.d/generic-tty.conf": "{\n  // reserved ttys\n  \"cdiVersion\": \"0.0.1\"\n}\n",
		"tty.d/x.conf~":          "editor backup",
		"stray.conf":             ctlConfs["gpu.d/drm.conf"],
		"gpu/other.conf":         ctlConfs["gpu.d/drm.conf"],
		"serial.d/s.conf":        `{"cdiVersion":"0.0.2","name":"s","type":"serial","plugin":"generic-tty","arg":{"pattern":"ttyS"}}`,
	})
	r := n.ctl("info")
	var caps map[string]any
	r.json(t, &caps)
	if r.status != 1 || caps["gpu"] != float64(8) {
		t.Fatalf("info: %d %s %s", r.status, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"config not used: " + filepath.Join(n.conf, "tty.d/generic-tty.conf") + ":2:3: not a JSON object: invalid character '/'",
		"warning: " + filepath.Join(n.conf, "gpu.d/20-drm.json") + ": not read: only *.conf files are configs",
		"warning: " + filepath.Join(n.conf, "stray.conf") + ": not read: configs go in a <type>.d folder",
		"warning: " + filepath.Join(n.conf, "gpu") + ": not read: the configs of type gpu go in gpu.d",
		"warning: " + filepath.Join(n.conf, "serial.d/s.conf") + `:1:79: unknown member "arg" is ignored; did you mean "args"?`,
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "x.conf~") {
		t.Errorf("an editor's backup is warned about:\n%s", r.stderr)
	}
	// Only the type asked for: gpu's configs are fine.
	if r := n.ctl("info", "gpu"); r.status != 0 {
		t.Errorf("info gpu: %d %s", r.status, r.stderr)
	}
	// add names the broken config of a type that has no other.
	if r := n.ctl("add", "--id", "a", "tty:1"); r.status != 1 || r.code(t) != 4 || !strings.Contains(r.stdout, "not used: "+filepath.Join(n.conf, "tty.d/generic-tty.conf")+":2:3") {
		t.Errorf("add tty:1: %d %s %s", r.status, r.stdout, r.stderr)
	}
	// add refuses a type whose folder holds a broken config beside a
	// usable one, which might not be the one meant to serve it.
	writeFile(t, filepath.Join(n.conf, "tty.d/zz.conf"), ctlConfs["tty.d/generic-tty.conf"])
	if r := n.ctl("add", "--id", "a", "tty:1"); r.status != 1 || r.code(t) != 101 || !strings.Contains(r.stdout, "generic-tty.conf of type tty cannot be used") {
		t.Errorf("add tty:1 beside a usable config: %d %s %s", r.status, r.stdout, r.stderr)
	}
	if err := os.Remove(filepath.Join(n.conf, "tty.d/zz.conf")); err != nil {
		t.Fatal(err)
	}

	r = n.ctl("validate", "-o", "table")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.status != 1 || len(lines) != 5 || !strings.HasPrefix(lines[0], filepath.Join(n.conf, "gpu")+": warning: ") {
		t.Fatalf("validate: %d\n%s\n%s", r.status, r.stdout, r.stderr)
	}

	good := newCtlNode(t, ctlHost(), ctlConfs)
	if r := good.ctl("validate"); r.status != 0 || !strings.Contains(r.stdout, `"problems": []`) {
		t.Errorf("validate of good configs: %d %s %s", r.status, r.stdout, r.stderr)
	}
	// The plugin checks the args: an unknown arg is a problem, placed.
	bad := newCtlNode(t, ctlHost(), map[string]string{"tty.d/t.conf": `{"cdiVersion":"0.0.1","name":"t","type":"tty","plugin":"generic-tty","args":{"num_system_reservd":1}}`})
	if r := bad.ctl("validate", "-o", "table"); r.status != 1 || !strings.Contains(r.stdout, "t.conf:1:99: plugin generic-tty refuses it: error: Invalid configuration: args.num_system_reservd: unknown field") {
		t.Errorf("validate of unknown args: %d %s %s", r.status, r.stdout, r.stderr)
	}
	// CDI spec files, as the CDI library reads them.
	specs := t.TempDir()
	writeFile(t, filepath.Join(specs, "good.json"), `{"cdiVersion":"0.6.0","kind":"example.com/gpu","devices":[{"name":"a","containerEdits":{"deviceNodes":[{"path":"/dev/x"}]}}]}`)
	writeFile(t, filepath.Join(specs, "bad.yaml"), "cdiVersion: [\n")
	r = good.ctl("validate", "--specs", "--spec-dir", specs, "-o", "table")
	if r.status != 1 || strings.Count(r.stdout, "\n") != 1 || !strings.HasPrefix(r.stdout, filepath.Join(specs, "bad.yaml")+": ") {
		t.Errorf("validate --specs: %d %q %s", r.status, r.stdout, r.stderr)
	}
	r = good.ctl("specs", "--spec-dir", specs)
	var sp struct {
		Devices []struct{ Name, Spec string }
		Errors  []struct{ File string }
	}
	r.json(t, &sp)
	if r.status != 1 || len(sp.Devices) != 1 || sp.Devices[0].Name != "example.com/gpu=a" || sp.Devices[0].Spec != filepath.Join(specs, "good.json") ||
		len(sp.Errors) != 1 {
		t.Errorf("specs: %d %s %s", r.status, r.stdout, r.stderr)
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A host root without sys/class or dev is warned about once, naming it,
// by cdictl and by a plugin that found nothing under it.
func TestWrongHostRoot(t *testing.T) {
	n := newCtlNode(t, ctlHost(), ctlConfs)
	wrong := t.TempDir()
	r := runArgs(t, filepath.Join(binDir, "cdictl"), []string{"info"}, []string{
		"CDI_HOST_ROOT=" + wrong, "CDI_STATE_DIR=" + n.state, "CDI_CONF_DIR=" + n.conf, "CDI_PATH=" + binDir,
	})
	want := "CDI_HOST_ROOT " + wrong + " has no sys/class directory"
	if r.status != 0 || strings.Count(r.stderr, want) != 1 {
		t.Errorf("cdictl info: %d %s", r.status, r.stderr)
	}
	p := runBin(t, filepath.Join(binDir, "generic-tty"), ctlConfs["tty.d/generic-tty.conf"], []string{"CDI_HOST_ROOT=" + wrong, "CDI_STATE_DIR=" + n.state, "CDI_COMMAND=INFO"})
	if p.status != 0 || !strings.Contains(p.stderr, "generic-tty: warning: "+want) {
		t.Errorf("generic-tty INFO: %d %s", p.status, p.stderr)
	}
	if r := n.ctl("info"); strings.Contains(r.stderr, "CDI_HOST_ROOT") {
		t.Errorf("a good host root is warned about: %s", r.stderr)
	}
}

// The conventions of kubectl and helm: -o json|yaml|table|wide and
// --output, --no-headers, completion, help COMMAND, "did you mean" for
// commands and flags, the usage line (not every flag) for a refused
// command line, conflicting flags refused.
func TestCdictlConventions(t *testing.T) {
	n := newCtlNode(t, ctlHost(), ctlConfs)
	if r := n.ctl("add", "--id", "pod-a", "tty:1"); r.status != 0 {
		t.Fatalf("add: %s %s", r.stdout, r.stderr)
	}
	tests := []struct {
		name   string
		args   []string
		status int
		stdout []string // each must appear
		stderr []string
		not    []string // none may appear in stdout or stderr
	}{
		{"yaml", []string{"info", "-o", "yaml"}, 0, []string{"cdiVersion: 0.0.2\ngpu: 8\ntty: 7\n"}, nil, nil},
		{"--output", []string{"info", "--output", "table"}, 0, []string{"RESOURCE  CAPACITY  PLUGINS\n"}, nil, nil},
		{"--no-headers", []string{"info", "-o", "table", "--no-headers"}, 0, []string{"gpu  8"}, nil, []string{"RESOURCE"}},
		{"wide", []string{"del", "--id", "nobody", "-o", "wide"}, 0, []string{"TYPE  PLUGIN       CONFIG", "tty.d/generic-tty.conf  nothing held"}, nil, nil},
		{"not wide", []string{"del", "--id", "nobody", "-o", "table"}, 0, []string{"TYPE  PLUGIN       RESULT"}, nil, []string{"CONFIG"}},
		{"bad -o", []string{"info", "-o", "xml"}, 2, nil, []string{"-o must be one of json, yaml, table, wide"}, nil},
		{"completion bash", []string{"completion", "bash"}, 0, []string{"bash completion", "cdictl"}, nil, nil},
		{"completion zsh", []string{"completion", "zsh"}, 0, []string{"#compdef cdictl"}, nil, nil},
		{"completion fish", []string{"completion", "fish"}, 0, []string{"complete -c cdictl"}, nil, nil},
		{"help add", []string{"help", "add"}, 0, []string{"Usage: cdictl add --id ID", "  --numa string"}, nil, nil},
		{"unknown command", []string{"inf"}, 2, nil, []string{`unknown command "inf"`, "Did you mean this?\n\tinfo"}, nil},
		{"unknown flag", []string{"gc", "--vaild", "x"}, 2, nil, []string{"unknown flag: --vaild", "Did you mean this?\n\t--valid", "Usage: cdictl gc --valid"}, []string{"--state-dir", "--conf-dir"}},
		{"conflicting flags", []string{"gc", "--valid", "x", "--none-valid"}, 2, nil, []string{"none-valid", "valid"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := n.ctl(tt.args...)
			if r.status != tt.status {
				t.Errorf("status %d, want %d\n%s%s", r.status, tt.status, r.stdout, r.stderr)
			}
			for _, w := range tt.stdout {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
				}
			}
			for _, w := range tt.stderr {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(r.stdout+r.stderr, w) {
					t.Errorf("output has %q:\n%s%s", w, r.stdout, r.stderr)
				}
			}
		})
	}
	// gc --none-valid still frees after a refused command line did not.
	if rows := n.lsRows(); len(rows) != 1 {
		t.Fatalf("a refused gc freed: %v", rows)
	}
}

// Small output glitches: a missing plugin binary says so with the path
// searched, an empty cell is "-", an error cell separates msg and details,
// the plugin and the store path are named once, and the delegate's row of
// a chained allocation says it is the delegate's.
func TestCdictlOutputGlitches(t *testing.T) {
	n := newCtlNode(t, ctlHost(), map[string]string{
		"ghost.d/ghost.conf": `{"cdiVersion":"0.0.2","name":"g","type":"ghost","plugin":"not-installed"}`,
	})
	r := n.ctl("info", "-o", "table")
	if r.status != 1 || !strings.Contains(r.stdout, "ghost     0         -") ||
		strings.Count(r.stderr, "not-installed") != 2 || // (plugin not-installed) and the name searched for
		!strings.Contains(r.stderr, `(plugin not-installed): exec: plugin not found: "not-installed" in `+n.scripts+":"+binDir) {
		t.Errorf("info: %d %q %q", r.status, r.stdout, r.stderr)
	}
	r = n.ctl("del", "--id", "x")
	var del struct {
		Results []struct {
			Error struct {
				Code         int
				Msg, Details string
			}
		}
	}
	r.json(t, &del)
	if r.status != 1 || len(del.Results) != 1 || del.Results[0].Error.Msg != "Plugin binary not found" ||
		!strings.Contains(del.Results[0].Error.Details, n.scripts+":"+binDir) {
		t.Errorf("del: %d %s", r.status, r.stdout)
	}
	if r := n.ctl("del", "--id", "x", "-o", "table"); !strings.Contains(r.stdout, "error: Plugin binary not found: plugin not found") {
		t.Errorf("del table: %s", r.stdout)
	}

	// check names a damaged store's path once.
	if err := os.MkdirAll(n.state, 0o700); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(n.state, "drm.db")
	if err := os.WriteFile(db, []byte("not a store"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = n.ctl("check", "--state-dir", n.state, "-o", "table")
	if r.status != 1 || strings.Count(r.stdout, db) != 1 || strings.Count(r.stderr, db) != 1 {
		t.Errorf("check: %d %q %q", r.status, r.stdout, r.stderr)
	}

	// ls of a VF handed out through sriov's delegate drm.
	d := demoNode(t, "../../demo/conf")
	if r := d.ctl("add", "--id", "pod-v", "vgpu:1"); r.status != 0 {
		t.Fatalf("add vgpu: %s %s", r.stdout, r.stderr)
	}
	r = d.ctl("ls")
	var out lsOut
	r.json(t, &out)
	if len(out.Allocations) != 2 || out.Allocations[0].Plugin != "drm" || out.Allocations[0].DelegateOf != "sriov" ||
		out.Allocations[1].Plugin != "sriov" || out.Allocations[1].Delegate != "drm" || out.Allocations[1].DelegateOf != "" {
		t.Fatalf("ls: %s", r.stdout)
	}
	if r := d.ctl("ls", "-o", "table"); !strings.Contains(r.stdout, "drm (delegate of sriov)") {
		t.Errorf("ls table: %s", r.stdout)
	}
}
