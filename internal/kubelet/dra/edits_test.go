package dra

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/cdi-exec/plugins/test/fixture"
)

// A claim for an NVIDIA GPU without DRM, under the shipped GKE-layout
// example: the slice carries the GPU's uuid, and the CDI device the
// prepared claim names brings the config's container_edits (the driver
// mounted read-only, LD_LIBRARY_PATH) with the GPU's nodes, from the spec
// the plugin wrote.
func TestClaimGetsContainerEdits(t *testing.T) {
	b, err := os.ReadFile("../../../conf/examples/cuda.d/nvidia-cuda.conf")
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t, fixture.H200VM(), nil)
	conf := strings.Replace(string(b), `"kind": "example.com/cuda",`, `"kind": "example.com/cuda", "dir": "`+n.specDir+`",`, 1)
	if err := os.MkdirAll(filepath.Join(n.conf, "cuda.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.conf, "cuda.d/cuda.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	n.start(n.options())
	const driver = "cuda.cdi-exec.io"
	devs := n.waitSlice(driver, []string{"pci-0000-00-06-0"})
	if u := devs[0].Attributes[attrUUID]; u.StringValue == nil || *u.StringValue != "GPU-fixture-0000:00:06.0" {
		t.Fatalf("uuid attribute: %+v", u)
	}
	c := n.claim("gpu", "uid-gpu", driver, "pci-0000-00-06-0")
	got := n.prepare(driver, c)
	if got.Error != "" || len(got.Devices) != 1 {
		t.Fatalf("prepare: %+v", got)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(n.specDir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(spec, got.Devices[0].CdiDeviceIds...); err != nil {
		t.Fatalf("injecting %v: %v", got.Devices[0].CdiDeviceIds, err)
	}
	var nodes []string
	for _, d := range spec.Linux.Devices {
		nodes = append(nodes, d.Path)
	}
	if want := []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}; !slices.Equal(nodes, want) {
		t.Fatalf("nodes %v, want %v", nodes, want)
	}
	if len(spec.Mounts) != 1 || spec.Mounts[0].Source != "/usr/local/nvidia" || !slices.Contains(spec.Process.Env, "LD_LIBRARY_PATH=/usr/local/nvidia/lib64") {
		t.Fatalf("edits: mounts %+v env %v", spec.Mounts, spec.Process.Env)
	}
}
