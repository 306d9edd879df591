//go:build e2enode

package k8se2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/test/fixture"
)

// TestClusterDRANVIDIACompute: on the H200 server as seen (fixture
// h200-vm: the nvidia driver without nvidia-drm, no DRM nodes), a type
// of drm with want_device_nodes [] and container_edits that mount the
// driver's user space serves the GPU through DRA: the claim's pod gets
// /dev/nvidia0 and the shared nodes with the driver's numbers, the
// mount and the environment of the config's container_edits. The mount's
// host path is the fixture's /usr/local/nvidia, a real directory of the
// node, so the runtime mounts exactly what the plugin checked.
func TestClusterDRANVIDIACompute(t *testing.T) {
	ctx, f := newFixtureRun(t, 30*time.Minute, fixture.H200VM(), false, map[string]string{
		"cuda": `{"cdiVersion": "0.0.2", "name": "CUDA", "type": "cuda", "plugin": "drm", "args": {"want_device_nodes": [],
  "cdi_spec": {"kind": "cdi-exec.io/cuda", "container_edits": {
    "env": ["LD_LIBRARY_PATH=/usr/local/nvidia/lib64", "PATH=/usr/local/nvidia/bin:/bin"],
    "mounts": [{"hostPath": "` + fixtureRoot + `/usr/local/nvidia", "containerPath": "/usr/local/nvidia", "options": ["ro", "nosuid", "nodev", "rbind"]}]}}}}`,
	}, map[string][]string{"cuda": {"pci-0000-00-06-0"}})

	f.yaml(ctx, t, claimYAML("default", "gpu", `
requests:
- name: r
  exactly: {deviceClassName: cuda.cdi-exec.io, count: 1}`)+fmt.Sprintf(`---
apiVersion: v1
kind: Pod
metadata: {name: cuda, namespace: default}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  restartPolicy: Never
  resourceClaims:
  - name: gpu
    resourceClaimName: gpu
  containers:
  - name: c
    image: %s
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "while :; do echo \"edits $(ls /usr/local/nvidia/bin /usr/local/nvidia/lib64 | tr '\\n' ' ') LD_LIBRARY_PATH=$LD_LIBRARY_PATH nodes $(stat -c '%%n=%%t:%%T' /dev/nvidia* | tr '\\n' ' ')\"; sleep 1; done"]
    resources:
      claims: [{name: gpu}]
`, Image))
	line, err := f.c.WaitLogLine(ctx, "cuda", "c", "edits ")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(line)
	for _, want := range []string{"nvidia-smi", "libcuda.so.1", "libnvidia-ml.so.1", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64",
		"/dev/nvidia0=c3:0", "/dev/nvidiactl=c3:ff", "/dev/nvidia-uvm=ee:0", "/dev/nvidia-uvm-tools=ee:1"} {
		if !slices.Contains(fields, want) {
			t.Fatalf("the container sees %q, without %s", line, want)
		}
	}
	t.Logf("the claim's container: %s", line)
}
