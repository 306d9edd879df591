package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// What a new user meets (issue 45): a table without rows says so, as
// kubectl does; validate counts 0 problems; a misspelt plugin is named
// with the one meant; every plugin's refusal of an arg is placed in the
// file, and says the member's path once.

// Empty tables say so on stderr, with nothing on stdout, exit 0; the
// JSON is the empty list, without the line.
func TestCdictlSaysWhenEmpty(t *testing.T) {
	confs := map[string]string{
		"kvm.d/generic.conf": `{"cdiVersion":"0.0.2","name":"k","type":"kvm","plugin":"generic","args":{"rules":[{"paths":["/dev/kvm"]}]}}`,
	}
	n := newCtlNode(t, fixture.Host{}, confs) // no /dev/kvm
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ls"}, "No allocations found\n"},
		{[]string{"devices"}, "No devices found\n"},
		{[]string{"check"}, "No stores found\n"},
		{[]string{"specs", "--spec-dir", t.TempDir()}, "No CDI devices found\n"},
	} {
		for _, o := range []string{"table", "wide"} {
			r := n.ctl(append(tc.args, "-o", o)...)
			if r.status != 0 || r.stdout != "" || !strings.HasSuffix(r.stderr, tc.want) {
				t.Errorf("%v -o %s: %d stdout %q stderr %q, want %q", tc.args, o, r.status, r.stdout, r.stderr, tc.want)
			}
		}
		if r := n.ctl(append(tc.args, "-o", "json")...); r.status != 0 || strings.Contains(r.stderr, "found") || !strings.Contains(r.stdout, "[]") {
			t.Errorf("%v -o json: %d %q %q", tc.args, r.status, r.stdout, r.stderr)
		}
	}
	// A table with rows prints them, and no such line.
	if r := n.ctl("add", "--id", "x", "kvm:1"); r.status != 1 {
		t.Fatalf("add without a kvm: %d %s", r.status, r.stdout)
	}
	if r := n.ctl("version", "-o", "table"); r.status != 0 || !strings.Contains(r.stdout, "generic") || strings.Contains(r.stderr, "found") {
		t.Errorf("version: %d %q %q", r.status, r.stdout, r.stderr)
	}
	for _, o := range []string{"table", "json"} {
		if r := n.ctl("validate", "-o", o); r.status != 0 || r.stderr != "cdictl: 0 problems\n" {
			t.Errorf("validate -o %s: %d %q", o, r.status, r.stderr)
		}
	}
}

// A config's plugin that is not on the search path is placed at its
// name, with the plugin meant when one is near.
func TestCdictlMisspeltPlugin(t *testing.T) {
	conf := "{\n  \"cdiVersion\": \"0.0.2\",\n  \"name\": \"t\",\n  \"type\": \"tty\",\n  \"plugin\": \"generic-ty\"\n}\n"
	n := newCtlNode(t, ctlHost(), map[string]string{"tty.d/t.conf": conf})
	r := n.ctl("validate", "-o", "table")
	want := filepath.Join(n.conf, "tty.d/t.conf") + `:5:13: plugin generic-ty: error: Plugin binary not found: plugin not found: "generic-ty" in ` +
		n.scripts + ":" + binDir + ` (the search path, CDI_PATH); --path overrides CDI_PATH; did you mean "generic-tty"?` + "\n"
	if r.status != 1 || r.stdout != want {
		t.Errorf("validate: %d\n got %q\nwant %q", r.status, r.stdout, want)
	}
	if r := n.ctl("info", "tty"); r.status != 1 || !strings.Contains(r.stderr, `; did you mean "generic-tty"?`) {
		t.Errorf("info: %d %q", r.status, r.stderr)
	}
}

// Every plugin refuses a misspelt top-level arg naming it once, at
// args.<name>, which validate places at file:line:col.
func TestCdictlPlacesArgTypos(t *testing.T) {
	plugins := []string{"drm", "generic", "generic-tty", "sriov"}
	confs := map[string]string{}
	for i, p := range plugins {
		typ := fmt.Sprintf("t%d", i)
		confs[typ+".d/a.conf"] = fmt.Sprintf("{\n  \"cdiVersion\": \"0.0.2\",\n  \"name\": \"x\",\n  \"type\": %q,\n  \"plugin\": %q,\n  \"args\": {\n    \"numa_polcy\": \"strict\"\n  }\n}\n", typ, p)
	}
	confs["u.d/a.conf"] = "{\n  \"cdiVersion\": \"0.0.2\",\n  \"name\": \"x\",\n  \"type\": \"u\",\n  \"plugin\": \"drm\",\n  \"args\": {\"numa_policy\": \"loose\"}\n}\n"
	n := newCtlNode(t, ctlHost(), confs)
	r := n.ctl("validate", "-o", "table")
	var want []string
	for i, p := range plugins {
		want = append(want, filepath.Join(n.conf, fmt.Sprintf("t%d.d/a.conf", i))+":7:19: plugin "+p+
			` refuses it: error: Invalid configuration: args.numa_polcy: unknown field "numa_polcy"; did you mean "numa_policy"?`)
	}
	want = append(want, filepath.Join(n.conf, "u.d/a.conf")+`:6:27: plugin drm refuses it: error: Invalid configuration: args.numa_policy: "loose" is neither "preferred" nor "strict"`)
	if got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); r.status != 1 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("validate: %d\n got %q\nwant %q", r.status, got, want)
	}
}
