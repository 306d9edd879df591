package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// git runs git on this checkout. It trusts the checkout whoever owns it,
// as the Makefile does (GIT_TRUST): a clone owned by another
// user ("dubious ownership") is still described.
func git(args ...string) *exec.Cmd {
	return exec.Command("git", append([]string{"-c", "safe.directory=*", "-C", "../.."}, args...)...)
}

// checkBuildInfo checks the text of --version: name and version, the
// commit, the protocol versions. Binaries built by make from a git
// checkout carry the commit they were built from; built where there was
// no git (no .git, or no git command), they say that the commit is
// unknown. A checkout that git cannot describe fails the test.
func checkBuildInfo(t *testing.T, name, text string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != 4 || !regexp.MustCompile(`^`+regexp.QuoteMeta(name)+` \S+$`).MatchString(lines[0]) ||
		!strings.HasPrefix(lines[1], "commit: ") || lines[2] != "protocol: 0.0.1, 0.0.2" || !strings.HasPrefix(lines[3], "go: go") {
		t.Fatalf("%s --version:\n%s", name, text)
	}
	if os.Getenv("CDI_TEST_BIN_DIR") == "" {
		return // built by the test harness, not by make: nothing stamped
	}
	_, noGit := exec.LookPath("git")
	if _, err := os.Stat("../../.git"); err != nil || noGit != nil {
		if lines[1] != "commit: unknown" {
			t.Errorf("%s: built without git (%v, %v), yet it says %q", name, err, noGit, lines[1])
		}
		return
	}
	if out, err := git("rev-parse", "HEAD").CombinedOutput(); err != nil {
		t.Fatalf("git cannot describe the checkout %s was built from: %v\n%s", name, err, out)
	}
	commit := strings.TrimSuffix(strings.TrimPrefix(lines[1], "commit: "), " (modified)")
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(commit) ||
		git("cat-file", "-e", commit+"^{commit}").Run() != nil {
		t.Errorf("%s: commit %q is not a commit of this repository", name, commit)
	}
	if strings.HasPrefix(lines[0], name+" (devel)") {
		t.Errorf("%s: no version stamped: %s", name, lines[0])
	}
}

// A plugin run by a person with --version prints its build on stdout and
// exits 0. It reads no stdin and ignores the protocol's variables: the
// bytes on stdin are still there afterwards and no store is created.
func TestPluginVersionFlag(t *testing.T) {
	for _, name := range []string{"drm", "generic-tty", "sriov"} {
		t.Run(name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			const sentinel = `{"cdiVersion":"0.0.2","name":"x","type":"tty","plugin":"generic-tty"}`
			if _, err := w.WriteString(sentinel); err != nil {
				t.Fatal(err)
			}
			w.Close()
			state := filepath.Join(t.TempDir(), "state")
			cmd := exec.Command(filepath.Join(binDir, name), "--version")
			cmd.Env = []string{"CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=x", "CDI_STATE_DIR=" + state}
			cmd.Stdin = r
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			if stderr.Len() != 0 {
				t.Errorf("stderr: %q", stderr.String())
			}
			checkBuildInfo(t, name, stdout.String())
			buf := make([]byte, len(sentinel)+1)
			if n, _ := r.Read(buf); string(buf[:n]) != sentinel {
				t.Errorf("stdin was read: %q left", buf[:n])
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Errorf("state dir touched: %v", err)
			}
		})
	}
}

// cdictl --version and cdictl version --client report the same build,
// without running a plugin (the plugin path is empty).
func TestCdictlVersion(t *testing.T) {
	ctl := filepath.Join(binDir, "cdictl")
	env := []string{"CDI_PATH=" + t.TempDir(), "CDI_CONF_DIR=" + t.TempDir()}
	text := runArgs(t, ctl, []string{"--version"}, env)
	if text.status != 0 || text.stderr != "" {
		t.Fatalf("--version: %d %s", text.status, text.stderr)
	}
	checkBuildInfo(t, "cdictl", text.stdout)
	if r := runArgs(t, ctl, []string{"version", "--client", "-o", "table"}, env); r.status != 0 || r.stdout != text.stdout {
		t.Errorf("version --client -o table: %d %q, want %q", r.status, r.stdout, text.stdout)
	}
	r := runArgs(t, ctl, []string{"version", "--client"}, env)
	var out struct {
		CDIVersion        string
		SupportedVersions []string
		Client            struct{ Version, Commit, Go string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.status != 0 {
		t.Fatalf("version --client: %d %v %s", r.status, err, r.stdout)
	}
	first := strings.SplitN(text.stdout, "\n", 2)[0]
	if out.CDIVersion != "0.0.2" || strings.Join(out.SupportedVersions, ",") != "0.0.1,0.0.2" ||
		first != "cdictl "+out.Client.Version || !strings.Contains(text.stdout, "commit: "+out.Client.Commit) {
		t.Errorf("version --client: %+v, --version: %s", out, text.stdout)
	}
	if r := runArgs(t, ctl, []string{"version", "--client", "gpu"}, env); r.status != 2 {
		t.Errorf("version --client gpu: %d, want a usage error", r.status)
	}
}
