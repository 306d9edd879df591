package docs

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// tryItMarker comes right before the README's try-it block: the commands
// that TestReadmeTryIt runs as they are written.
const tryItMarker = "<!-- try-it: test/docs TestReadmeTryIt runs this block as it is -->"

// tryItBlock returns the fenced shell block that follows the marker.
func tryItBlock(t *testing.T, readme string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, tryItMarker+"\n")
	if !ok {
		t.Fatalf("the README lacks the try-it marker %q", tryItMarker)
	}
	body, ok := strings.CutPrefix(rest, "```sh\n")
	if !ok {
		t.Fatal("the README's try-it marker is not followed by a ```sh block")
	}
	body, _, ok = strings.Cut(body, "\n```\n")
	if !ok {
		t.Fatal("the README's try-it block does not end")
	}
	return body + "\n"
}

// nobody is the unprivileged user the try-it block runs as under root.
const nobody = 65534

// The README's first section works from the clone, without installing,
// on this machine's own kvm, fuse, tun and ttys: its commands, copied
// from the README, run with bash in a copy of the clone's bin/ and conf/
// in a temporary directory, as an unprivileged user (nobody, when the test
// runs as root; the plugins only read sysfs and stat /dev, so no device's
// mode matters), with no CDI_* variable set. The block itself must point
// the state directory at a temporary one: the live /var/lib/cdi stays as
// it was, and the block leaves nothing behind.
func TestReadmeTryIt(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := tryItBlock(t, string(readme))
	for _, want := range []string{"CDI_STATE_DIR=", "CDI_CONF_DIR=", "CDI_PATH=$PWD/bin", "bin/cdictl info", "bin/cdictl devices", "bin/cdictl add", "bin/cdictl ls", "bin/cdictl del", `rm -rf "$try"`} {
		if !strings.Contains(block, want) {
			t.Errorf("the README's try-it block lacks %q", want)
		}
	}
	if strings.Contains(block, "sudo") || strings.Contains(block, "/etc/cdi") || strings.Contains(block, "/opt/cdi") {
		t.Errorf("the README's try-it block needs an installed node:\n%s", block)
	}
	// The devices it hands out: a machine without one of them (a container,
	// a VM without nested virtualisation) cannot run it as written.
	for _, p := range []string{"/dev/kvm", "/dev/fuse", "/dev/net/tun", "/sys/class/tty/tty14"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("this machine lacks %s, which the README's try-it block hands out: %v", p, err)
		}
	}

	// A copy of the clone's bin/ (the plugins and cdictl) and conf/,
	// readable by the user the block runs as.
	// Not t.TempDir: its parent is root's alone (0700), which nobody
	// could not enter.
	clone, err := os.MkdirTemp("", "cdi-try-it")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(clone) })
	if err := os.Chmod(clone, 0o755); err != nil {
		t.Fatal(err)
	}
	copyTree(t, pluginBin(t), filepath.Join(clone, "bin"), func(name string) bool {
		return name == "cdictl" || isPlugin(name)
	})
	copyTree(t, "../../conf", filepath.Join(clone, "conf"), func(string) bool { return true })
	tmp := filepath.Join(clone, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = clone
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + clone, "TMPDIR=" + tmp, "LC_ALL=C"}
	if os.Getuid() == 0 {
		if err := filepath.WalkDir(clone, func(path string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(path, nobody, nobody)
		}); err != nil {
			t.Fatal(err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	}
	before := statLiveState()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the README's try-it block failed: %v\n%s\n--- output:\n%s", err, block, out.String())
	}
	got := out.String()
	for _, want := range []string{
		`(?m)^kvm +8 +generic$`,
		`(?m)^fuse +16 +generic$`,
		`(?m)^tun +16 +generic$`,
		`(?m)^tty +[1-9][0-9]* +generic-tty$`,
		`"/dev/kvm",\n *"/dev/fuse",\n *"/dev/net/tun",\n *"/dev/tty[0-9]+",\n *"/dev/tty[0-9]+"\n`,
		`(?m)^try-1 +generic +kvm:1 +/dev/kvm `,
		`(?m)^tty +generic-tty +freed$`,
		`(?m)^kvm +generic +freed$`,
		// The last ls: nothing is held any more.
		`\nNo allocations found\n$`,
	} {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("the try-it block's output does not match %s:\n%s", want, got)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the try-it block left %v in TMPDIR", left)
	}
	if after := statLiveState(); after != before {
		t.Errorf("the try-it block changed the live /var/lib/cdi: %s, then %s", before, after)
	}
}

// statLiveState describes the node's live state directory, which no test
// may touch: absent, or there with its modification time.
func statLiveState() string {
	fi, err := os.Stat("/var/lib/cdi")
	if err != nil {
		return "absent"
	}
	return fi.ModTime().String()
}

// isPlugin reports whether name is one of the repository's plugins.
func isPlugin(name string) bool {
	fi, err := os.Stat(filepath.Join("../../plugins", name))
	return err == nil && fi.IsDir()
}

// pluginBin is where the built plugins and cdictl are: CDI_TEST_BIN_DIR
// (make test), or a fresh build of them.
func pluginBin(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("CDI_TEST_BIN_DIR"); dir != "" {
		return dir
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/", "./plugins/...", "./cmd/cdictl")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the plugins and cdictl: %v\n%s", err, out)
	}
	return dir
}

// copyTree copies the regular files of src whose names keep accepts, and
// every directory, to dst, keeping their modes.
func copyTree(t *testing.T, src, dst string, keep func(name string) bool) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() || !keep(d.Name()) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, fi.Mode().Perm()|0o444)
	})
	if err != nil {
		t.Fatal(err)
	}
}
