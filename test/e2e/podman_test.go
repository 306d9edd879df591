package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPodmanInjectsAllocatedTTYs proves the CDI bridge with a real runtime:
// generic-tty allocates two of this machine's real virtual consoles and
// writes a transient spec to /var/run/cdi; podman (with runc) injects them
// by name into a busybox container, which sees the right device numbers.
//
// It needs root, podman, runc and busybox-static (.ci/run installs them
// from Debian when it can) and the host's virtual consoles; without them it
// skips and says why.
func TestPodmanInjectsAllocatedTTYs(t *testing.T) {
	for _, bin := range []string{"podman", "runc", "busybox"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed (apt-get install podman runc busybox-static)", bin)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run podman with the host's devices")
	}
	if _, err := os.Stat("/sys/class/tty/tty14/uevent"); err != nil {
		t.Skip("this host has no virtual consoles tty13 and tty14 to hand out")
	}
	image := "localhost/cdi-exec-busybox:e2e"
	if err := importBusybox(t, image); err != nil {
		t.Skipf("cannot build a busybox image with podman import: %v", err)
	}
	// Can this machine run a container at all? If not, the environment is
	// the problem, not the bridge.
	if out, err := podman(60*time.Second, "run", "--rm", "--runtime", "runc", "--network", "none",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", image, "/bin/true"); err != nil {
		t.Skipf("podman cannot run a plain container here: %v\n%s", err, out)
	}

	state := t.TempDir()
	id := fmt.Sprintf("e2e%d", os.Getpid())
	conf := `{"cdiVersion":"0.0.2","name":"vt","type":"tty","plugin":"generic-tty","args":{"num_system_reserved":12,"cdi_spec":{"kind":"cdi-exec.test/tty"}}}`
	env := []string{"CDI_HOST_ROOT=/", "CDI_STATE_DIR=" + state, "CDI_REQUEST_ID=" + id}
	bin := filepath.Join(binDir, "generic-tty")
	t.Cleanup(func() { runBin(t, bin, conf, append(env, "CDI_COMMAND=DEL")) })

	r := runBin(t, bin, conf, append(env, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:2"))
	if r.status != 0 {
		t.Fatalf("ADD: %s", r.stdout)
	}
	devices := r.devices(t)
	name := "cdi-exec.test/tty=" + id
	out, err := podman(60*time.Second, "run", "--rm", "--runtime", "runc", "--network", "none",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
		"--device", name, image, "/bin/stat", "-c", "%n %t:%T %F", devices[0], devices[1])
	if err != nil {
		t.Fatalf("podman run --device %s: %v\n%s", name, err, out)
	}
	t.Logf("inside the container:\n%s", out)
	var want []string
	for _, d := range devices {
		want = append(want, fmt.Sprintf("%s %s character special file", d, hexDev(t, d)))
	}
	if got := strings.TrimSpace(out); got != strings.Join(want, "\n") {
		t.Fatalf("inside the container:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	// After DEL the name no longer resolves.
	if r := runBin(t, bin, conf, append(env, "CDI_COMMAND=DEL")); r.status != 0 || r.stdout != "" {
		t.Fatalf("DEL: %s", r.stdout)
	}
	if out, err := podman(60*time.Second, "run", "--rm", "--runtime", "runc", "--network", "none",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--device", name, image, "/bin/true"); err == nil {
		t.Fatalf("podman still resolves %s after DEL:\n%s", name, out)
	}
}

// hexDev returns a node's major:minor as busybox stat prints them (%t:%T).
func hexDev(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/class/tty", filepath.Base(path), "dev"))
	if err != nil {
		t.Fatal(err)
	}
	var major, minor int
	fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &major, &minor)
	return fmt.Sprintf("%x:%x", major, minor)
}

func podman(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
	return string(out), err
}

// importBusybox makes a one-binary image from busybox-static; no registry
// is needed.
func importBusybox(t *testing.T, image string) error {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return err
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return err
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bin/busybox"), data, 0o755); err != nil {
		return err
	}
	for _, c := range []string{"sh", "stat", "true", "ls"} {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", c)); err != nil {
			return err
		}
	}
	cmd := exec.Command("sh", "-c", "tar -C "+dir+" -c . | podman import - "+image)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}
