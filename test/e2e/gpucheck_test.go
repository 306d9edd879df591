package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// fakeLibcuda is a stand-in for the NVIDIA driver's libcuda.so.1 with the
// two entry points cudacount calls: one device.
const fakeLibcuda = `int cuInit(unsigned int flags) { return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
`

// A dry run of the script prepared for a real GPU machine
// (scripts/gpu-container-check.sh), on the H200 fixture: the plugin's
// steps on the fixture host, and a real runc container built from the
// spec the plugin wrote, with a stand-in driver directory (a fake
// nvidia-smi and a fake libcuda.so.1 that answers one device) mounted by
// the config's container_edits. Every check of the script passes, so on
// the real machine only the driver differs.
func TestGPUContainerCheckScript(t *testing.T) {
	for _, bin := range []string{"runc", "busybox", "gcc"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed (scripts/test-deps.sh installs it)", bin)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run runc")
	}
	needRealNodes(t)
	n := newNode(t, fixture.H200VM())
	tools, out := t.TempDir(), t.TempDir()
	driver := filepath.Join(t.TempDir(), "nvidia")
	for _, d := range []string{"bin", "lib64"} {
		if err := os.MkdirAll(filepath.Join(driver, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	smi := "#!/bin/sh\necho \"GPU 0: NVIDIA H200 (UUID: GPU-fixture-0000:00:06.0)\"\n"
	if err := os.WriteFile(filepath.Join(driver, "bin/nvidia-smi"), []byte(smi), 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "cuda.c")
	if err := os.WriteFile(src, []byte(fakeLibcuda), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("gcc", "-shared", "-fPIC", "-o", filepath.Join(driver, "lib64/libcuda.so.1"), src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	// The plugin looks the mount's host path up under the host root.
	if err := os.MkdirAll(filepath.Dir(n.root+driver), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(driver, n.root+driver); err != nil {
		t.Fatal(err)
	}
	script := "../../scripts/gpu-container-check.sh"
	env := append(os.Environ(), "GPUCHECK_DIR="+tools, "BIN="+binDir)
	prep := exec.Command(script, "prepare")
	prep.Env = env
	if b, err := prep.CombinedOutput(); err != nil {
		t.Fatalf("prepare: %v\n%s", err, b)
	}
	run := exec.Command(script, "run")
	run.Env = append(env, "OUT="+out, "HOST_ROOT="+n.root, "DRIVER_DIR="+driver)
	err := run.Run()
	report, rerr := os.ReadFile(filepath.Join(out, "report.txt"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	var checks []string
	for _, line := range strings.Split(string(report), "\n") {
		if strings.HasPrefix(line, "OK: ") || strings.HasPrefix(line, "FAIL: ") || strings.HasPrefix(line, "result: ") {
			checks = append(checks, line)
		}
	}
	t.Logf("checks:\n%s", strings.Join(checks, "\n"))
	if err != nil || len(checks) != 7 || checks[6] != "result: PASS" {
		t.Fatalf("run: %v\n%s", err, report)
	}
}
