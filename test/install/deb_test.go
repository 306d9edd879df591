package install

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// debRoot is a throwaway root with its own dpkg database.
type debRoot struct {
	t    *testing.T
	dir  string
	deb  string
	root bool // running as root: chroot into dir
}

// debPackage returns the package `make test-deb` built, or skips.
func debPackage(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CDI_TEST_DEB")
	if dir == "" {
		t.Skip("CDI_TEST_DEB is not set: `make test-deb` builds the package and runs this test")
	}
	for _, tool := range []string{"dpkg", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed; it is needed to install the package", tool)
		}
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "*.deb"))
	if len(debs) != 1 {
		t.Fatalf("want one package in %s, found %v", dir, debs)
	}
	return debs[0]
}

func newDebRoot(t *testing.T, deb string) *debRoot {
	r := &debRoot{t: t, dir: t.TempDir(), deb: deb, root: os.Geteuid() == 0}
	admin := filepath.Join(r.dir, "var/lib/dpkg")
	for _, d := range []string{"info", "updates", "triggers"} {
		if err := os.MkdirAll(filepath.Join(admin, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"status", "available"} {
		if err := os.WriteFile(filepath.Join(admin, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// dpkg runs dpkg on the throwaway root only; its log stays inside it.
func (r *debRoot) dpkg(args ...string) string {
	r.t.Helper()
	base := []string{"--root=" + r.dir, "--log=" + filepath.Join(r.dir, "dpkg.log")}
	if !r.root {
		base = append(base, "--force-not-root")
	}
	out, err := exec.Command("dpkg", append(base, args...)...).CombinedOutput()
	if err != nil {
		r.t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (r *debRoot) exists(rel string) bool {
	_, err := os.Lstat(filepath.Join(r.dir, rel))
	return err == nil
}

// run runs an installed binary as on a node with this root: chrooted with
// the default paths when we are root, else with the paths pointed into
// the root. The fixture host is at /host inside the root.
func (r *debRoot) run(bin string, args ...string) (stdout, stderr string, status int) {
	r.t.Helper()
	var cmd *exec.Cmd
	if r.root {
		cmd = exec.Command("chroot", append([]string{r.dir, bin}, args...)...)
		cmd.Env = []string{"CDI_HOST_ROOT=/host", "PATH=/usr/bin:/bin"}
	} else {
		cmd = exec.Command(filepath.Join(r.dir, bin), args...)
		cmd.Env = []string{"CDI_HOST_ROOT=" + filepath.Join(r.dir, "host"),
			"CDI_CONF_DIR=" + filepath.Join(r.dir, "etc/cdi"), "CDI_PATH=" + filepath.Join(r.dir, "opt/cdi/bin"),
			"CDI_STATE_DIR=" + filepath.Join(r.dir, "var/lib/cdi")}
	}
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		r.t.Fatalf("%s: %v", bin, err)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// The package holds the binaries and the shipped configs as conffiles;
// installed into a throwaway root, cdictl there serves a fixture host with
// the installed configs and plugins; removing it keeps configs and state,
// purging it keeps state.
func TestDeb(t *testing.T) {
	deb := debPackage(t)
	// The control file: a Maintainer with an address, as Debian policy
	// asks, and a description of both of cdi-kubelet-plugin's modes.
	fields, err := exec.Command("dpkg-deb", "-f", deb, "Maintainer", "Description").CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb -f: %v\n%s", err, fields)
	}
	if !regexp.MustCompile(`(?m)^Maintainer: .+ <[^@\s<>]+@[^@\s<>]+\.[^@\s<>]+>$`).Match(fields) ||
		!strings.Contains(string(fields), "DRA driver") || !strings.Contains(string(fields), "device-plugin") {
		t.Errorf("control fields:\n%s", fields)
	}
	confs, _ := filepath.Glob(filepath.Join(repo, "conf/*.d/*.conf"))
	var wantConffiles []string
	for _, c := range confs {
		rel, _ := filepath.Rel(filepath.Join(repo, "conf"), c)
		wantConffiles = append(wantConffiles, "/etc/cdi/"+rel)
	}
	r := newDebRoot(t, deb)
	r.dpkg("--install", deb)
	status := r.dpkg("--status", "cdi-exec-plugins")
	if !strings.Contains(status, "Status: install ok installed") {
		t.Fatalf("not installed:\n%s", status)
	}
	var gotConffiles []string
	for _, l := range strings.Split(status, "\n") {
		if f := strings.Fields(l); len(f) == 2 && strings.HasPrefix(f[0], "/etc/") {
			gotConffiles = append(gotConffiles, f[0])
		}
	}
	slices.Sort(gotConffiles)
	if !slices.Equal(gotConffiles, wantConffiles) {
		t.Errorf("conffiles %v, want %v", gotConffiles, wantConffiles)
	}
	var want []string
	for _, p := range names(t, "plugins") {
		want = append(want, "opt/cdi/bin/"+p)
	}
	for _, p := range names(t, "cmd") {
		want = append(want, "usr/bin/"+p)
	}
	for _, p := range append(want, "usr/share/doc/cdi-exec-plugins/copyright", "usr/share/doc/cdi-exec-plugins/third-party/go.etcd.io/bbolt/LICENSE") {
		if !r.exists(p) {
			t.Errorf("%s is not installed", p)
		}
	}
	// cdictl's completions, where each shell looks for a package's.
	for _, p := range []string{"usr/share/bash-completion/completions/cdictl", "usr/share/zsh/vendor-completions/_cdictl", "usr/share/fish/vendor_completions.d/cdictl.fish"} {
		b, err := os.ReadFile(filepath.Join(r.dir, p))
		if err != nil || !strings.Contains(string(b), "__complete") || !strings.Contains(string(b), "cdictl") {
			t.Errorf("%s is not cdictl's completion script: %v %.100q", p, err, b)
		}
	}

	h, err := fixture.Load(filepath.Join(repo, "demo/host.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Build(filepath.Join(r.dir, "host")); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := r.run("/usr/bin/cdictl", "info", "-o", "json")
	var caps map[string]any
	if err := json.Unmarshal([]byte(stdout), &caps); err != nil || code != 0 {
		t.Fatalf("cdictl info: %d %v\n%s\n%s", code, err, stdout, stderr)
	}
	wantCaps := map[string]any{"cdiVersion": "0.0.2", "gpu": float64(5), "tty": float64(51)}
	if !reflect.DeepEqual(caps, wantCaps) {
		t.Errorf("cdictl info = %v, want %v", caps, wantCaps)
	}
	stdout, stderr, code = r.run("/usr/bin/cdictl", "add", "--id", "deb-test", "-o", "json", "tty:1")
	if code != 0 || !strings.Contains(stdout, `"/dev/tty13"`) {
		t.Fatalf("cdictl add: %d\n%s\n%s", code, stdout, stderr)
	}
	if !r.exists("var/lib/cdi/generic-tty.db") {
		t.Error("the allocation is not in the root's /var/lib/cdi")
	}
	stdout, _, code = r.run("/opt/cdi/bin/drm", "--version")
	if code != 0 || !strings.HasPrefix(stdout, "drm v") || !strings.Contains(stdout, "protocol: 0.0.1, 0.0.2") {
		t.Errorf("drm --version: %d %q", code, stdout)
	}

	r.dpkg("--remove", "cdi-exec-plugins")
	for _, p := range []string{"opt/cdi/bin/drm", "usr/bin/cdictl"} {
		if r.exists(p) {
			t.Errorf("remove left %s", p)
		}
	}
	for _, p := range []string{"etc/cdi/gpu.d/drm.conf", "var/lib/cdi/generic-tty.db"} {
		if !r.exists(p) {
			t.Errorf("remove took %s", p)
		}
	}
	r.dpkg("--purge", "cdi-exec-plugins")
	if r.exists("etc/cdi/gpu.d/drm.conf") || !r.exists("var/lib/cdi/generic-tty.db") {
		t.Error("purge must remove the conffiles and keep the state")
	}
}
