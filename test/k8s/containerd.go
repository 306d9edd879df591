//go:build e2enode

package k8se2e

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"
)

// Image is the one container image a node has: busybox-static, imported
// locally (there is no registry). It is also the pod sandbox image.
const Image = "localhost/cdi-e2e/busybox:1"

// containerd is a private containerd: its own root, state, sockets, CNI
// and CDI spec dirs, runc state and config.
type containerd struct {
	dir  string // everything lives under it
	sock string
	d    *daemon
}

var containerdConfig = template.Must(template.New("").Parse(`version = 3
root = '{{.Dir}}/root'
state = '{{.Dir}}/state'
imports = []
disabled_plugins = ['io.containerd.nri.v1.nri', 'io.containerd.internal.v1.tracing']

[grpc]
  address = '{{.Sock}}'
[ttrpc]
  address = '{{.Dir}}/ttrpc.sock'

[plugins.'io.containerd.internal.v1.opt']
  path = '{{.Dir}}/opt'
[plugins.'io.containerd.image-verifier.v1.bindir']
  bin_dir = '{{.Dir}}/image-verifier'
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{{.Image}}'
[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ['{{.CDI}}']
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_criu = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['{{.Dir}}/cni/bin']
    conf_dir = '{{.Dir}}/cni/net.d'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    Root = '{{.Dir}}/runc'
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
`))

// A CNI config the runtime can load, so it reports the network ready.
// Pods use the host's network, so no plugin ever runs.
const dummyCNI = `{"cniVersion": "1.0.0", "name": "cdi-e2e", "plugins": [{"type": "loopback"}]}`

// startContainerd writes the config and starts containerd with the CDI
// spec dir cdi, then imports the busybox image.
func startContainerd(ctx context.Context, cg *cgroups, dir, logDir, cdi string) (*containerd, error) {
	c := &containerd{dir: dir, sock: filepath.Join(dir, "containerd.sock")}
	for _, d := range []string{"cni/bin", "cni/net.d", "opt", "image-verifier"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cni/net.d/10-cdi-e2e.conflist"), []byte(dummyCNI), 0o644); err != nil {
		return nil, err
	}
	var conf strings.Builder
	data := map[string]string{"Dir": dir, "Sock": c.sock, "Image": Image, "CDI": cdi}
	if err := containerdConfig.Execute(&conf, data); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(conf.String()), 0o644); err != nil {
		return nil, err
	}
	if err := c.serve(ctx, cg, logDir); err != nil {
		return c, err
	}
	return c, c.importImage(ctx, filepath.Join(dir, "image"))
}

// serve starts containerd with its config (again, after it stopped) and
// waits until it answers.
func (c *containerd) serve(ctx context.Context, cg *cgroups, logDir string) error {
	d, err := spawn(cg, logDir, "containerd", filepath.Join(tools(), "containerd"), []string{"--config", filepath.Join(c.dir, "config.toml")}, nil)
	if err != nil {
		return err
	}
	c.d = d
	return waitFor(ctx, "containerd to serve", func(ctx context.Context) error {
		_, err := c.ctr(ctx, "version")
		return err
	}, d)
}

// ctr runs ctr against this containerd, in the kubelet's namespace.
func (c *containerd) ctr(ctx context.Context, args ...string) (string, error) {
	args = append([]string{"--address", c.sock, "--namespace", "k8s.io"}, args...)
	return run(ctx, nil, filepath.Join(tools(), "ctr"), args...)
}

// importImage makes the busybox image the documented way, without a
// registry: a rootfs of busybox-static, podman import, podman save as an
// OCI archive, ctr images import. podman uses private storage under dir,
// so the machine's own podman images are never touched.
func (c *containerd) importImage(ctx context.Context, dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return err
	}
	rootfs := filepath.Join(dir, "rootfs.tar")
	if err := busyboxTar(ctx, rootfs); err != nil {
		return err
	}
	podman := []string{
		"--root", filepath.Join(dir, "storage"), "--runroot", filepath.Join(dir, "run"),
		"--tmpdir", filepath.Join(dir, "libpod"), "--storage-driver", "vfs",
		"--events-backend", "none", "--cgroup-manager", "cgroupfs",
	}
	env := []string{"TMPDIR=" + filepath.Join(dir, "tmp")}
	archive := filepath.Join(dir, "busybox.oci.tar")
	steps := [][]string{
		append(podman, "import", "--change", `CMD ["/bin/sleep", "2147483647"]`, rootfs, Image),
		append(podman, "save", "--format", "oci-archive", "--output", archive, Image),
	}
	for _, args := range steps {
		if _, err := run(ctx, env, "podman", args...); err != nil {
			return err
		}
	}
	if err := c.importArchive(ctx, archive); err != nil {
		return err
	}
	out, err := c.ctr(ctx, "images", "ls", "--quiet")
	if err != nil {
		return err
	}
	if !strings.Contains(out, Image) {
		return fmt.Errorf("ctr images import did not name the image %s; containerd has:\n%s", Image, out)
	}
	return nil
}

// importArchive loads an image archive (OCI or Docker) into the
// kubelet's namespace.
func (c *containerd) importArchive(ctx context.Context, archive string) error {
	_, err := c.ctr(ctx, "images", "import", "--local", archive)
	return err
}

// busyboxTar writes a root filesystem holding /bin/busybox and a link for
// each of its applets.
func busyboxTar(ctx context.Context, path string) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return err
	}
	list, err := run(ctx, nil, bb, "--list")
	if err != nil {
		return err
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := tar.NewWriter(f)
	for _, d := range []string{"bin/", "dev/", "etc/", "proc/", "sys/", "tmp/"} {
		w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755})
	}
	w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(data))})
	w.Write(data)
	for _, applet := range strings.Fields(list) {
		if applet != "busybox" {
			w.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox"})
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

// shimSockets lists the sockets of this containerd's shims among pids.
// Shims put them in /run/containerd/s whatever containerd's state dir is,
// named by a hash of containerd's address, the namespace and the task id
// the shim was started for, which its command line gives.
func (c *containerd) shimSockets(pids []int) []string {
	_, socks := c.shims(pids)
	return socks
}

// shims picks this containerd's shims among pids, and their sockets.
func (c *containerd) shims(pids []int) (shims []int, socks []string) {
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if filepath.Base(args[0]) != "containerd-shim-runc-v2" {
			continue
		}
		flags := map[string]string{}
		for i := 1; i+1 < len(args); i++ {
			if strings.HasPrefix(args[i], "-") {
				flags[strings.TrimLeft(args[i], "-")] = args[i+1]
			}
		}
		if flags["address"] != c.sock || flags["id"] == "" {
			continue
		}
		sum := sha256.Sum256([]byte(filepath.Join(c.sock, flags["namespace"], flags["id"])))
		shims = append(shims, pid)
		socks = append(socks, fmt.Sprintf("/run/containerd/s/%x", sum))
	}
	return shims, socks
}
