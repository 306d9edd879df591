//go:build e2enode

// Package k8se2e runs the suite on a real node of this machine: a private
// containerd and a standalone kubelet (make e2e-node), joined to a private
// etcd, kube-apiserver, kube-scheduler and kube-controller-manager for
// make e2e-cluster. The tools come pinned from test/k8s/build-tools.sh.
//
// Everything a test starts runs in a private cgroup and writes under a
// private directory; the few host paths the kubelet and containerd insist
// on are recorded before and restored after (see hostState). The files
// carry the build tag e2enode, so make test neither builds nor runs them.
package k8se2e

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// kubeletDir is where the kubelet looks for device plugins whatever its
// --root-dir says; tests link it to their private root while they run.
const kubeletDir = "/var/lib/kubelet"

// tools is where test/k8s/build-tools.sh puts the pinned binaries.
func tools() string {
	cache := os.Getenv("CDI_E2E_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "cdi-e2e")
	}
	return filepath.Join(cache, "bin")
}

// repoBin is where the repository's binaries are: $CDI_TEST_BIN_DIR, as
// for test/e2e (the Makefile sets it to bin/).
func repoBin(t *testing.T) string {
	dir := os.Getenv("CDI_TEST_BIN_DIR")
	if dir == "" {
		t.Fatal("CDI_TEST_BIN_DIR is not set: run make e2e-node, or make build and set it to bin/")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// preflight skips the test when this machine cannot run a node, saying
// why, and fails it when something is missing that the build script would
// have provided.
func preflight(t *testing.T, toolNames ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: containerd, runc and the kubelet make mounts, cgroups and namespaces")
	}
	if target, err := os.Readlink(kubeletDir); err == nil && strings.Contains(target, "/cdi-e2e-") {
		t.Skipf("%s links to %s: another run of these tests is using this machine, or one was killed "+
			"without cleaning up (then remove the link)", kubeletDir, target)
	}
	if _, err := os.Lstat(kubeletDir); err == nil {
		t.Skipf("%s exists: a kubelet may use this machine, and the tests only run where they can point it at a private root and remove it after", kubeletDir)
	}
	for _, name := range toolNames {
		if _, err := os.Stat(filepath.Join(tools(), name)); err != nil {
			t.Fatalf("%s is not built: run test/k8s/build-tools.sh (make e2e-node does): %v", name, err)
		}
	}
	for cmd, pkg := range map[string]string{"runc": "runc", "podman": "podman", "busybox": "busybox-static"} {
		if _, err := exec.LookPath(cmd); err != nil {
			t.Fatalf("%s is not installed: apt-get install %s (test/k8s/build-tools.sh does, as root)", cmd, pkg)
		}
	}
	if err := os.WriteFile("/proc/sys/vm/overcommit_memory", readSysctl(t, "vm/overcommit_memory"), 0o644); err != nil {
		t.Skipf("/proc/sys is not writable (%v): the kubelet must set kernel tunables", err)
	}
}

// sysctls are the kernel tunables the kubelet sets at start
// (vm.overcommit_memory=1, kernel.panic=10, ...). Tests put back what
// was there.
var sysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
	"kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

func readSysctl(t *testing.T, name string) []byte {
	data, err := os.ReadFile(filepath.Join("/proc/sys", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// hostState is what a node changes outside its private directory, as it
// was before: the kubelet's sysctls, /var/log/containers (created by the
// kubelet, which links container logs there), and containerd's shim
// socket directory /run/containerd/s (fixed whatever containerd's state
// dir is).
type hostState struct {
	sysctl  map[string][]byte
	created []string // directories that did not exist, deepest last
}

var hostDirs = []string{"/var/log/containers", "/run/containerd", "/run/containerd/s"}

func saveHost(t *testing.T) *hostState {
	h := &hostState{sysctl: map[string][]byte{}}
	for _, s := range sysctls {
		h.sysctl[s] = readSysctl(t, s)
	}
	for _, d := range hostDirs {
		if _, err := os.Lstat(d); errors.Is(err, fs.ErrNotExist) {
			h.created = append(h.created, d)
		}
	}
	return h
}

// restore puts the sysctls back and removes the directories the node
// created. /var/log/containers holds only links to the node's own logs
// (or links the node's kubelet made in it); the others must be empty by
// now, and are left alone if they are not.
func (h *hostState) restore(logDir string) error {
	var errs []error
	for name, v := range h.sysctl {
		errs = append(errs, os.WriteFile(filepath.Join("/proc/sys", name), v, 0o644))
	}
	errs = append(errs, removeLinksInto("/var/log/containers", logDir))
	for i := len(h.created) - 1; i >= 0; i-- {
		if err := os.Remove(h.created[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%s was created by this test and is not empty: %w", h.created[i], err))
		}
	}
	return errors.Join(errs...)
}

// removeLinksInto removes the symlinks in dir that point under target.
func removeLinksInto(dir, target string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if to, err := os.Readlink(p); err == nil && strings.HasPrefix(to, target+"/") {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// linkKubeletDir points /var/lib/kubelet at root. It fails if anything is
// there already; the returned func removes the link if it is still ours.
func linkKubeletDir(root string) (func() error, error) {
	if err := os.Symlink(root, kubeletDir); err != nil {
		return nil, fmt.Errorf("pointing %s at the private root: %w", kubeletDir, err)
	}
	return func() error {
		if to, err := os.Readlink(kubeletDir); err != nil || to != root {
			return fmt.Errorf("%s no longer links to %s (%q, %v); left alone", kubeletDir, root, to, err)
		}
		return os.Remove(kubeletDir)
	}, nil
}
