package kubelettest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Plugins returns the absolute directory of the plugin binaries for a
// test binary's TestMain: $CDI_TEST_BIN_DIR (make test sets it), or a
// fresh build of pkgs (such as "../../../plugins/..."), which done
// removes.
func Plugins(pkgs string) (dir string, done func(), err error) {
	done = func() {}
	dir = os.Getenv("CDI_TEST_BIN_DIR")
	if dir == "" {
		if dir, err = os.MkdirTemp("", "cdi-kubelet-test-bin"); err != nil {
			return "", done, err
		}
		done = func() { os.RemoveAll(dir) }
		cmd := exec.Command("go", "build", "-o", dir+"/", pkgs)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return "", done, fmt.Errorf("building plugins: %w", err)
		}
	}
	abs, err := filepath.Abs(dir)
	return abs, done, err
}

// Main is a TestMain for tests that run the plugins: it finds or builds
// them (Plugins), sets *dir, runs the tests and exits. name labels a setup
// failure.
func Main(m *testing.M, name, pkgs string, dir *string) {
	d, done, err := Plugins(pkgs)
	if err != nil {
		done()
		fmt.Fprintln(os.Stderr, name+" test setup:", err)
		os.Exit(2)
	}
	*dir = d
	code := m.Run()
	done()
	os.Exit(code)
}
