//go:build e2enode

package k8se2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/test/sockdir"
)

// Node is one test's node: a private containerd and a kubelet, and the
// other daemons the test starts on it. It is torn down, leaving nothing
// behind, when the test ends.
type Node struct {
	t       *testing.T
	Dir     string // the node's private directory
	CDIDir  string // containerd's only CDI spec dir
	pki     *pki
	cg      *cgroups
	ctrd    *containerd
	kl      *kubelet
	Kubelet *daemon
	api     *client // the kubelet's API, anonymous
	daemons []*daemon
}

// StartNode starts containerd and a standalone kubelet (static pods only)
// for t and arranges to tear them down. It skips t when this machine
// cannot run them.
func StartNode(t *testing.T) *Node {
	t.Helper()
	preflight(t, "containerd", "containerd-shim-runc-v2", "ctr", "kubelet")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	n := newNode(t)
	if err := n.start(ctx, ""); err != nil {
		t.Fatal(err)
	}
	return n
}

// newNode makes the node's private directory, CA and cgroup, and
// registers its teardown.
func newNode(t *testing.T) *Node { return newHostNode(t, true) }

// newHostNode is newNode; without kubelet, for a control plane that no
// kubelet of this machine joins (make bench-scale), it neither points
// /var/lib/kubelet at the node's directory nor records the host state a
// kubelet and containerd change.
func newHostNode(t *testing.T, kubelet bool) *Node {
	t.Helper()
	// A short directory, whatever TMPDIR is: the kubelet's sockets and
	// the DRA registration socket (<root>/plugins_registry/<driver>-<pod
	// UID>-reg.sock) must fit in a unix socket path.
	dir := sockdir.New(t, "cdi-e2e-")
	n := &Node{t: t, Dir: dir, CDIDir: filepath.Join(dir, "cdi")}
	for _, d := range []string{"logs", "cdi", "pki", "kubelet/root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The CDI spec dir is a tmpfs, as /var/run/cdi is on a real node
	// (/run), not a directory of this machine's disk; teardown unmounts
	// it with every mount under dir.
	if err := unix.Mount("tmpfs", n.CDIDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64m,mode=0755"); errors.Is(err, unix.EPERM) {
		t.Skipf("this machine cannot mount a tmpfs (no CAP_SYS_ADMIN), which a node's CDI spec dir is: %v", err)
	} else if err != nil {
		t.Fatalf("mounting a tmpfs on the node's CDI spec dir: %v", err)
	}
	t.Cleanup(func() {
		if err := unmountUnder(n.CDIDir); err != nil {
			t.Error(err)
		}
	})
	var host *hostState
	if kubelet {
		// The link is taken first: it is also what keeps two nodes from
		// running on this machine at once.
		unlink, err := linkKubeletDir(filepath.Join(dir, "kubelet/root"))
		if errors.Is(err, fs.ErrExist) {
			t.Skipf("%s appeared meanwhile: another kubelet is starting on this machine", kubeletDir)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := unlink(); err != nil {
				t.Error(err)
			}
		})
		host = saveHost(t)
	}
	var err error
	if n.pki, err = newPKI(filepath.Join(dir, "pki")); err != nil {
		t.Fatal(err)
	}
	if n.api, err = newClient(n.pki, "", ""); err != nil {
		t.Fatal(err)
	}
	n.cg, err = newCgroups(filepath.Base(dir))
	if errors.Is(err, errCannot) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.teardown(host) })
	return n
}

// start starts containerd and the kubelet, joined to the API server of
// kubeconfig if there is one.
func (n *Node) start(ctx context.Context, kubeconfig string) error {
	var err error
	n.ctrd, err = startContainerd(ctx, n.cg, filepath.Join(n.Dir, "containerd"), n.logDir(), n.CDIDir)
	if n.ctrd != nil {
		n.daemons = append(n.daemons, n.ctrd.d)
	}
	if err != nil {
		return err
	}
	gates, err := featureGates(ctx, filepath.Join(tools(), "kubelet"))
	if err != nil {
		return err
	}
	n.kl, err = newKubelet(filepath.Join(n.Dir, "kubelet"), n.pki, n.ctrd.sock, "/"+n.cg.name+"/pods", kubeconfig, gates)
	if err != nil {
		return err
	}
	return n.StartKubelet(ctx)
}

func (n *Node) logDir() string { return filepath.Join(n.Dir, "logs") }

// StartKubelet starts the kubelet (again, after StopKubelet).
func (n *Node) StartKubelet(ctx context.Context) error {
	d, err := n.kl.start(ctx, n.cg, n.logDir(), n.api)
	if d != nil {
		n.Kubelet = d
		n.daemons = append(n.daemons, d)
	}
	return err
}

// StopKubelet stops the kubelet gracefully. Its pods keep running.
func (n *Node) StopKubelet() { n.Kubelet.stop(30 * time.Second) }

// ImportImage loads an image archive (OCI or Docker, as podman save
// writes them) into the node's containerd, where pods with
// imagePullPolicy Never find it.
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	return n.ctrd.importArchive(ctx, archive)
}

// Spawn starts a daemon on the node, in its cgroup, logging to its log
// directory; it is stopped when the test ends, before the kubelet.
func (n *Node) Spawn(name, bin string, args, env []string) *daemon {
	n.t.Helper()
	d, err := spawn(n.cg, n.logDir(), name, bin, args, env)
	if err != nil {
		n.t.Fatal(err)
	}
	n.daemons = append(n.daemons, d)
	return d
}

// teardown stops everything in the reverse order it started, then kills
// whatever is left in the node's cgroup (containers, shims), removes the
// shims' sockets, unmounts everything under the node's directory, removes
// the cgroup and restores the host state, if it was recorded.
func (n *Node) teardown(host *hostState) {
	if n.t.Failed() {
		for _, d := range n.daemons {
			n.t.Logf("--- %s log (%s), last lines:\n%s", d.name, d.log, d.tail(40))
		}
	}
	for _, d := range slices.Backward(n.daemons) {
		d.stop(20 * time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var socks []string
	if n.ctrd != nil {
		socks = n.ctrd.shimSockets(n.cg.pids())
	}
	errs := []error{n.cg.remove(ctx)}
	for _, s := range socks {
		if err := os.Remove(s); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, unmountUnder(n.Dir))
	if host != nil {
		errs = append(errs, host.restore(filepath.Join(n.Dir, "kubelet", "pods")))
	}
	if err := errors.Join(errs...); err != nil {
		n.t.Errorf("tearing the node down: %v", err)
	}
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var mounts []string
	s := bufio.NewScanner(strings.NewReader(string(data)))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	// Later mounts may be on top of earlier ones: undo them in reverse.
	var errs []error
	for _, mp := range slices.Backward(mounts) {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// RandomID returns n random hex digits, for names unique to one run.
func RandomID(n int) string {
	b := make([]byte, (n+1)/2)
	rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// Reboot does to the node what a reboot does: the kubelet and containerd
// stop, every container and shim dies, and what a boot finds gone from
// its tmpfs /run is removed (containerd's state and mounts, runc's state,
// the shims' sockets). Then between runs, the host changing while it is
// down (devices renumbered, the CDI spec dir emptied), and containerd and
// the kubelet start again, which starts the node's pods afresh. The
// kubelet's root, containerd's root (images, containers) and the daemons
// spawned beside them (a control plane) are left as they are.
func (n *Node) Reboot(ctx context.Context, between func() error) error {
	n.StopKubelet()
	n.ctrd.d.stop(20 * time.Second)
	_, socks := n.ctrd.shims(n.cg.pids())
	for {
		shims, _ := n.ctrd.shims(n.cg.pids())
		left := append(shims, n.cg.pidsUnder("pods")...)
		if len(left) == 0 {
			break
		}
		for _, pid := range left {
			unix.Kill(pid, unix.SIGKILL)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("processes %v outlive SIGKILL: %w", left, err)
		}
	}
	for _, s := range socks {
		if err := os.Remove(s); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	for _, d := range []string{"state", "runc"} {
		dir := filepath.Join(n.ctrd.dir, d)
		if err := unmountUnder(dir); err != nil {
			return err
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := between(); err != nil {
		return err
	}
	err := n.ctrd.serve(ctx, n.cg, n.logDir())
	n.daemons = append(n.daemons, n.ctrd.d)
	if err != nil {
		return err
	}
	return n.StartKubelet(ctx)
}
