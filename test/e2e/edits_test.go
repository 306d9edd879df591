package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/cdi-exec/plugins/test/fixture"
	"github.com/cdi-exec/plugins/test/kubelettest"
)

// exampleConf reads a shipped example config and points its cdi_spec at
// dir.
func exampleConf(t *testing.T, rel, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../conf/examples", rel))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, `"kind": "`)
	if i < 0 {
		t.Fatalf("%s has no cdi_spec kind", rel)
	}
	return s[:i] + `"dir": "` + dir + `", ` + s[i:]
}

// injected applies a request's CDI device to an empty OCI spec as a
// runtime does (podman, containerd and CRI-O all call the CDI library's
// injection), from the spec files in dir.
func injected(t *testing.T, dir, device string) *oci.Spec {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("spec errors: %v", errs)
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(spec, device); err != nil {
		t.Fatalf("injecting %s: %v %v", device, unresolved, err)
	}
	return spec
}

// The GKE layout on the H200 server as seen: ADD hands out the GPU's
// nodes without DRM, and the spec it writes carries the config's
// container_edits, which a runtime's injection puts into the container:
// /usr/local/nvidia mounted read-only, LD_LIBRARY_PATH and PATH set, the
// device nodes in the order of the answer.
func TestH200ContainerEdits(t *testing.T) {
	n := newNode(t, fixture.H200VM())
	dir := filepath.Join(t.TempDir(), "cdi")
	conf := exampleConf(t, "cuda.d/nvidia-cuda.conf", dir)
	r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=cuda:1", "CDI_REQUEST_ID=pod1")
	if got := strings.Join(r.devices(t), " "); got != computeNodes(0) {
		t.Fatalf("ADD: %s %s", got, r.stdout)
	}
	for _, name := range []string{"example.com/cuda=pod1", "example.com/cuda=pod1_0000:00:06.0"} {
		spec := injected(t, dir, name)
		var nodes []string
		for _, d := range spec.Linux.Devices {
			nodes = append(nodes, d.Path)
		}
		if got := strings.Join(nodes, " "); got != computeNodes(0) {
			t.Errorf("%s: device nodes %s", name, got)
		}
		if len(spec.Mounts) != 1 || spec.Mounts[0].Source != "/usr/local/nvidia" || spec.Mounts[0].Destination != "/usr/local/nvidia" || !slices.Contains(spec.Mounts[0].Options, "ro") {
			t.Errorf("%s: mounts %+v", name, spec.Mounts)
		}
		if !slices.Contains(spec.Process.Env, "LD_LIBRARY_PATH=/usr/local/nvidia/lib64") || !slices.ContainsFunc(spec.Process.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=/usr/local/nvidia/bin:") }) {
			t.Errorf("%s: env %v", name, spec.Process.Env)
		}
	}
	if r := n.run("drm", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=pod1"); r.status != 0 {
		t.Fatalf("DEL: %s", r.stdout)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(files) != 0 {
		t.Fatalf("DEL left %v", files)
	}
}

// The distribution layout mounts single files. On a host that lacks one
// of them, INFO offers nothing, DEVICES says which path is missing, ADD
// refuses (107) and leaves no record and no spec, and cdictl validate
// reports it, as it reports edits the CDI library refuses.
func TestContainerEditsMissingHostPath(t *testing.T) {
	h := fixture.H200VM()
	h.Files = slices.DeleteFunc(h.Files, func(f string) bool { return f == "usr/bin/nvidia-smi" })
	dir := filepath.Join(t.TempDir(), "cdi")
	conf := exampleConf(t, "cudadistro.d/nvidia-cuda-distro.conf", dir)
	n := newCtlNode(t, h, map[string]string{"cudadistro.d/cuda.conf": conf})
	if got := n.run("drm", conf, "CDI_COMMAND=INFO").obj(t)["cudadistro"]; got != float64(0) {
		t.Fatalf("INFO: %v", got)
	}
	d := inventory(t, n.run("drm", conf, "CDI_COMMAND=DEVICES"))["0000:00:06.0"]
	if d.Usable || !strings.Contains(d.Reason, "mount host path /usr/bin/nvidia-smi does not exist") {
		t.Fatalf("DEVICES: %+v", d)
	}
	r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=cudadistro:1", "CDI_REQUEST_ID=pod1")
	if r.code(t) != 107 || !strings.Contains(r.stdout, "/usr/bin/nvidia-smi") {
		t.Fatalf("ADD: %s", r.stdout)
	}
	if recs := n.records("drm"); len(recs) != 0 {
		t.Fatalf("records after a refused ADD: %v", recs)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Fatalf("spec files after a refused ADD: %v", files)
	}
	v := n.ctl("validate", "-o", "table")
	if v.status != 1 || !strings.Contains(v.stdout, "cuda.conf: cdi_spec container_edits: mount host path /usr/bin/nvidia-smi does not exist") {
		t.Fatalf("validate: %d %s %s", v.status, v.stdout, v.stderr)
	}
	// With the file there, the config is valid and ADD publishes the
	// three mounts.
	if err := os.MkdirAll(filepath.Join(n.root, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.root, "usr/bin/nvidia-smi"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if v := n.ctl("validate", "-o", "table"); v.status != 0 {
		t.Fatalf("validate with the file: %d %s %s", v.status, v.stdout, v.stderr)
	}
	if r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=cudadistro:1", "CDI_REQUEST_ID=pod1"); r.status != 0 {
		t.Fatalf("ADD: %s", r.stdout)
	}
	if spec := injected(t, dir, "example.com/cudadistro=pod1"); len(spec.Mounts) != 3 {
		t.Fatalf("mounts: %+v", spec.Mounts)
	}
}

// cdictl validate runs the CDI library's own validation of container_edits
// (the plugin refuses the same edits by the same rules).
func TestValidateContainerEdits(t *testing.T) {
	conf := drmConf(`{"want_device_nodes":[],"cdi_spec":{"kind":"example.com/cuda","container_edits":{"env":["=oops"]}}}`)
	n := newCtlNode(t, fixture.H200VM(), map[string]string{"gpu.d/bad.conf": conf})
	v := n.ctl("validate", "-o", "table")
	if v.status != 1 || !strings.Contains(v.stdout, `invalid environment variable "=oops"`) {
		t.Fatalf("validate: %d %s %s", v.status, v.stdout, v.stderr)
	}
	if r := n.run("drm", conf, "CDI_COMMAND=INFO"); r.code(t) != 101 {
		t.Fatalf("INFO: %s", r.stdout)
	}
}

// The device-plugin mode hands the kubelet the names of the spec the
// plugin wrote under the config's cdi_spec, so the container gets the
// config's container_edits with the GPU: checked on the cdi-kubelet-plugin
// binary against a fake kubelet, on the H200 server as seen.
func TestDevicePluginContainerEdits(t *testing.T) {
	specs := filepath.Join(t.TempDir(), "cdi")
	n := newCtlNode(t, fixture.H200VM(), map[string]string{"cuda.d/cuda.conf": exampleConf(t, "cuda.d/nvidia-cuda.conf", specs)})
	k := kubelettest.Start(t)
	cmd := exec.Command(filepath.Join(binDir, "cdi-kubelet-plugin"), "device-plugin",
		"--conf-dir", n.conf, "--kubelet-dir", k.Root, "--cdi-spec-dir", filepath.Join(t.TempDir(), "unused"), "--resource-prefix", "example.com")
	cmd.Env = []string{"CDI_PATH=" + binDir, "CDI_STATE_DIR=" + n.state, "CDI_HOST_ROOT=" + n.root}
	var logs kubelettest.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	var reg *api.RegisterRequest
	select {
	case reg = <-k.Registrations:
	case <-time.After(time.Minute):
		t.Fatalf("no registration within a minute:\n%s", logs.String())
	}
	resp, err := k.Dial(reg.Endpoint).Allocate(context.Background(), &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{"0000:00:06.0"}}}})
	if err != nil {
		t.Fatalf("Allocate: %v\n%s", err, logs.String())
	}
	cdiDevs := resp.ContainerResponses[0].CdiDevices
	if len(cdiDevs) != 1 {
		t.Fatalf("CDI devices %v", cdiDevs)
	}
	spec := injected(t, specs, cdiDevs[0].Name)
	if len(spec.Linux.Devices) != 4 || spec.Linux.Devices[0].Path != "/dev/nvidia0" || len(spec.Mounts) != 1 || spec.Mounts[0].Source != "/usr/local/nvidia" ||
		!slices.Contains(spec.Process.Env, "LD_LIBRARY_PATH=/usr/local/nvidia/lib64") {
		t.Fatalf("container of %s: devices %+v mounts %+v env %v", cdiDevs[0].Name, spec.Linux.Devices, spec.Mounts, spec.Process.Env)
	}
}

// A container_edits hook runs as root on the host: a hook whose program
// (or a directory on its way) anyone but root may replace is refused as
// an invalid config (101) by INFO, DEVICES and ADD, which opens no
// store and publishes nothing, and reported by cdictl validate, while DEL exits 0;
// once the program is root's alone, the same config works.
func TestContainerEditsUntrustedHook(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the fixture's hook program must belong to root")
	}
	h := fixture.H200VM()
	h.Files = append(h.Files, "usr/bin/nvidia-cdi-hook")
	dir := filepath.Join(t.TempDir(), "cdi")
	conf := drmConf(`{"want_device_nodes":[],"cdi_spec":{"kind":"example.com/cuda","dir":"` + dir + `","container_edits":{"hooks":[` +
		`{"hookName":"createContainer","path":"/usr/bin/nvidia-cdi-hook","args":["nvidia-cdi-hook","update-ldcache"]}]}}}`)
	n := newCtlNode(t, h, map[string]string{"gpu.d/hook.conf": conf})
	hook := filepath.Join(n.root, "usr/bin/nvidia-cdi-hook")
	for _, tt := range []struct {
		name string
		mode os.FileMode
		want string
	}{
		{"group-writable program", 0o775, "hook createContainer /usr/bin/nvidia-cdi-hook: the program is writable by its group or others (mode 0775)"},
		{"world-writable directory", 0o755, "hook createContainer /usr/bin/nvidia-cdi-hook: the directory /usr/bin is writable by its group or others (mode 0777)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.Chmod(hook, tt.mode); err != nil {
				t.Fatal(err)
			}
			binMode := os.FileMode(0o755)
			if strings.Contains(tt.want, "directory") {
				binMode = 0o777
			}
			if err := os.Chmod(filepath.Dir(hook), binMode); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range [][]string{
				{"CDI_COMMAND=INFO"},
				{"CDI_COMMAND=DEVICES"},
				{"CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=pod1"},
			} {
				if r := n.run("drm", conf, cmd...); r.code(t) != 101 || !strings.Contains(r.stdout, tt.want) {
					t.Errorf("%s: %s", cmd[0], r.stdout)
				}
			}
			// ADD refused before it opened the store: there is none.
			if _, err := os.Stat(filepath.Join(n.state, "drm.db")); !os.IsNotExist(err) {
				t.Errorf("the store after a refused ADD: %v", err)
			}
			if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
				t.Errorf("spec files after a refused ADD: %v", files)
			}
			if r := n.run("drm", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=pod1"); r.status != 0 {
				t.Errorf("DEL: %d %s", r.status, r.stdout)
			}
			v := n.ctl("validate", "-o", "table")
			if v.status != 1 || !strings.Contains(v.stdout, "hook.conf: cdi_spec container_edits: "+tt.want) {
				t.Errorf("validate: %d %s %s", v.status, v.stdout, v.stderr)
			}
		})
	}
	for _, p := range []string{hook, filepath.Dir(hook)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if v := n.ctl("validate", "-o", "table"); v.status != 0 {
		t.Fatalf("validate with root's program: %d %s %s", v.status, v.stdout, v.stderr)
	}
	if r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=pod1"); r.status != 0 {
		t.Fatalf("ADD with root's program: %s", r.stdout)
	}
	if spec := injected(t, dir, "example.com/cuda=pod1"); spec.Hooks == nil || len(spec.Hooks.CreateContainer) != 1 {
		t.Fatalf("hooks: %+v", spec.Hooks)
	}
}
