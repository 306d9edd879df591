package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/test/fixture"
	"github.com/cdi-exec/plugins/test/sockdir"
)

// TestPodmanInjectsAllocatedTTYs proves the CDI bridge with a real runtime:
// generic-tty allocates two ttys of a fixture host and writes a transient
// spec; podman (with runc) injects them by name into a busybox container,
// which sees the device numbers of the spec.
//
// Nothing of the live node is touched: the ttys are fixture nodes with the
// numbers of /dev/null and /dev/zero, never a device the node's own store
// could hold; the kind, the state dir and the spec dir are private; podman
// keeps its storage, run and tmp dirs in a temporary directory and runs in
// a private mount namespace whose /run (and /etc/cdi) is an empty tmpfs
// with the spec dir bound at /run/cdi, the only place podman 4 reads
// transient specs from; the container runs from a plain root directory
// (no image store) under a cgroup parent of its own, removed afterwards.
//
// It needs root, podman, runc, busybox-static and unshare (.ci/run installs
// them from Debian when it can); without them it skips and says why.
func TestPodmanInjectsAllocatedTTYs(t *testing.T) {
	pm := newPodman(t)
	h := fixture.Host{TTYs: map[string]int{"tty": 16}}
	n := newNode(t, h)
	// tty13 and tty14 are handed out: make them harmless nodes, and say so
	// in sysfs too, since only a node with sysfs's numbers is handed out.
	for name, dev := range map[string]uint64{"tty13": unix.Mkdev(1, 3), "tty14": unix.Mkdev(1, 5)} {
		p := filepath.Join(n.root, "dev", name)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(p, unix.S_IFCHR|0o600, int(dev)); err != nil {
			t.Fatal(err)
		}
		sys := filepath.Join(n.root, "sys/class/tty", name)
		numbers := fmt.Sprintf("%d:%d\n", unix.Major(dev), unix.Minor(dev))
		uevent := fmt.Sprintf("MAJOR=%d\nMINOR=%d\nDEVNAME=%s\n", unix.Major(dev), unix.Minor(dev), name)
		if err := os.WriteFile(filepath.Join(sys, "dev"), []byte(numbers), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sys, "uevent"), []byte(uevent), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	id := fmt.Sprintf("e2e%d", os.Getpid())
	kind := fmt.Sprintf("e2e%d.cdi-exec.test/tty", os.Getpid())
	conf := `{"cdiVersion":"0.0.2","name":"vt","type":"tty","plugin":"generic-tty","args":{"num_system_reserved":12,` +
		`"cdi_spec":{"kind":"` + kind + `","dir":"` + pm.specs + `"}}}`
	t.Cleanup(func() { n.run("generic-tty", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+id) })

	r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:2", "CDI_REQUEST_ID="+id)
	if r.status != 0 {
		t.Fatalf("ADD: %s", r.stdout)
	}
	devices := r.devices(t)
	name := kind + "=" + id
	out, err := pm.run("--device", name, "/bin/stat", "-c", "%n %t:%T %F", devices[0], devices[1])
	if err != nil {
		t.Fatalf("podman run --device %s: %v\n%s", name, err, out)
	}
	t.Logf("inside the container:\n%s", out)
	want := fmt.Sprintf("%s 1:3 character special file\n%s 1:5 character special file", devices[0], devices[1])
	if got := strings.TrimSpace(out); got != want {
		t.Fatalf("inside the container:\n%s\nwant:\n%s", got, want)
	}
	// A device's own name (cdiKeyDevices) injects that device alone.
	var keyed struct {
		CDIKeyDevices map[string]string `json:"cdiKeyDevices"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &keyed); err != nil || len(keyed.CDIKeyDevices) != 2 {
		t.Fatalf("ADD names no device's own CDI device: %v %s", err, r.stdout)
	}
	one := keyed.CDIKeyDevices[filepath.Base(devices[0])]
	out, err = pm.run("--device", one, "/bin/sh", "-c", "stat -c '%n %t:%T %F' /dev/tty1[0-9]")
	if err != nil {
		t.Fatalf("podman run --device %s: %v\n%s", one, err, out)
	}
	t.Logf("with --device %s, inside the container:\n%s", one, out)
	if want := devices[0] + " 1:3 character special file"; strings.TrimSpace(out) != want {
		t.Fatalf("with --device %s the container has:\n%s\nwant:\n%s", one, out, want)
	}
	// After DEL the name no longer resolves.
	if r := n.run("generic-tty", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+id); r.status != 0 || r.stdout != "" {
		t.Fatalf("DEL: %s", r.stdout)
	}
	if out, err := pm.run("--device", name, "/bin/true"); err == nil {
		t.Fatalf("podman still resolves %s after DEL:\n%s", name, out)
	}
}

// TestPodmanContainerEdits: a config's container_edits reach a real
// container through the spec the plugin writes. generic-tty hands out a
// harmless tty (the numbers of /dev/null) with a cdi_spec whose edits
// mount a host directory read-only and set an environment variable; the
// busybox container sees the device, the file in the mount and the
// variable, and cannot write to the mount.
//
// The mount's host path is a real temporary directory, since podman
// mounts it from the host, and the same path exists under the fixture's
// host root, where the plugin looks host paths up.
func TestPodmanContainerEdits(t *testing.T) {
	pm := newPodman(t)
	n := newNode(t, fixture.Host{TTYs: map[string]int{"tty": 14}})
	p := filepath.Join(n.root, "dev", "tty13")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	sys := filepath.Join(n.root, "sys/class/tty/tty13")
	if err := os.WriteFile(filepath.Join(sys, "dev"), []byte("1:3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sys, "uevent"), []byte("MAJOR=1\nMINOR=3\nDEVNAME=tty13\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	driver := filepath.Join(pm.dir, "driver")
	for _, d := range []string{driver, filepath.Join(n.root, driver)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(driver, "libfake.so.1"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("e2eedits%d", os.Getpid())
	kind := fmt.Sprintf("e2e%d.cdi-exec.test/tty", os.Getpid())
	conf := `{"cdiVersion":"0.0.2","name":"vt","type":"tty","plugin":"generic-tty","args":{"num_system_reserved":12,` +
		`"cdi_spec":{"kind":"` + kind + `","dir":"` + pm.specs + `","container_edits":{` +
		`"env":["CDI_EDITS_TEST=from-the-config","LD_LIBRARY_PATH=/opt/driver"],` +
		`"mounts":[{"hostPath":"` + driver + `","containerPath":"/opt/driver","options":["ro","nosuid","nodev","bind"]}]}}}}`
	t.Cleanup(func() { n.run("generic-tty", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+id) })
	r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID="+id)
	if r.status != 0 {
		t.Fatalf("ADD: %s", r.stdout)
	}
	name := kind + "=" + id
	out, err := pm.run("--device", name, "/bin/sh", "-c",
		`stat -c '%n %t:%T' /dev/tty13; cat /opt/driver/libfake.so.1; echo "$CDI_EDITS_TEST $LD_LIBRARY_PATH"; touch /opt/driver/x 2>/dev/null && echo writable || echo read-only`)
	if err != nil {
		t.Fatalf("podman run --device %s: %v\n%s", name, err, out)
	}
	t.Logf("inside the container:\n%s", out)
	want := "/dev/tty13 1:3\nfrom the host\nfrom-the-config /opt/driver\nread-only"
	if got := strings.TrimSpace(out); got != want {
		t.Fatalf("inside the container:\n%s\nwant:\n%s", got, want)
	}
}

// podmanEnv is a podman kept entirely in a temporary directory.
type podmanEnv struct {
	t      *testing.T
	dir    string
	specs  string // bound at /run/cdi inside podman's mount namespace
	rootfs string // busybox
	cgroup string // cgroup parent of the containers
	env    []string
}

// newPodman sets up a private podman, or skips the test saying what this
// machine lacks.
func newPodman(t *testing.T) *podmanEnv {
	t.Helper()
	for _, bin := range []string{"podman", "runc", "busybox", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed (apt-get install podman runc busybox-static util-linux)", bin)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run podman")
	}
	needRealNodes(t)
	// A short directory: conmon's socket paths under it must fit in
	// sun_path, or podman waits 20 s for every container's exit.
	dir := sockdir.New(t, "cdi-pm-")
	pm := &podmanEnv{t: t, dir: dir, specs: filepath.Join(dir, "cdi"), rootfs: filepath.Join(dir, "rootfs"),
		cgroup: fmt.Sprintf("cdi-e2e-%d-%d", os.Getpid(), time.Now().UnixNano())}
	files := map[string]string{
		"storage.conf": fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n",
			filepath.Join(dir, "root"), filepath.Join(dir, "runroot")),
		"containers.conf": fmt.Sprintf("[engine]\ntmp_dir = %q\nvolume_path = %q\nevents_logger = \"none\"\ncgroup_manager = \"cgroupfs\"\n"+
			"[network]\nnetwork_config_dir = %q\n", filepath.Join(dir, "tmp"), filepath.Join(dir, "volumes"), filepath.Join(dir, "net")),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{pm.specs, filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := busyboxRoot(pm.rootfs); err != nil {
		t.Skipf("cannot lay out a busybox root: %v", err)
	}
	pm.env = append(os.Environ(), "CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
		"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"), "TMPDIR="+filepath.Join(dir, "tmp"))
	t.Cleanup(pm.removeCgroups)
	// Can this machine run a container at all? If not, the environment is
	// the problem, not the bridge.
	if out, err := pm.run("/bin/true"); err != nil {
		t.Skipf("podman cannot run a plain container here: %v\n%s", err, out)
	}
	return pm
}

// privateRun is the shell that puts podman in its own mount namespace with
// an empty /run (and /etc/cdi), and the spec dir ($0) at /run/cdi.
const privateRun = `set -e
mount -t tmpfs -o mode=0755 cdi-e2e /run
mkdir /run/cdi
mount --bind "$0" /run/cdi
if [ -d /etc/cdi ]; then mount -t tmpfs -o mode=0755 cdi-e2e /etc/cdi; fi
exec podman "$@"`

// run runs a busybox container with args (podman run options, then the
// command) and returns its combined output.
func (pm *podmanEnv) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := []string{"--mount", "--propagation", "private", "sh", "-c", privateRun, pm.specs,
		"run", "--rm", "--runtime", "runc", "--network", "none", "--cgroup-parent", "/" + pm.cgroup,
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "--") {
		i += 2 // an option and its value
	}
	// With --rootfs, the first argument is the root directory.
	argv = append(append(append(argv, args[:i]...), "--rootfs", pm.rootfs), args[i:]...)
	cmd := exec.CommandContext(ctx, "unshare", argv...)
	cmd.Env = pm.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// removeCgroups removes the cgroup parent podman made for the containers
// (and conmon's below it) in every hierarchy.
func (pm *podmanEnv) removeCgroups() {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", pm.cgroup))
	more, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", pm.cgroup))
	for _, d := range append(dirs, more...) {
		subs, _ := filepath.Glob(filepath.Join(d, "*"))
		for _, s := range subs {
			if fi, err := os.Stat(s); err == nil && fi.IsDir() {
				if err := removeCgroup(s); err != nil {
					pm.t.Errorf("removing cgroup %s: %v", s, err)
				}
			}
		}
		if err := removeCgroup(d); err != nil {
			pm.t.Errorf("removing cgroup %s: %v", d, err)
		}
	}
}

// removeCgroup removes a cgroup directory, waiting up to 5 s while it is
// busy: conmon's cgroup empties a moment after podman returns, as conmon
// exits after the container.
func removeCgroup(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := os.Remove(dir)
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// busyboxRoot lays out a one-binary root directory from busybox-static.
func busyboxRoot(dir string) error {
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
	return nil
}
