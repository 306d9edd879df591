// Package install tests what a node operator runs: make install,
// install-conf and uninstall under DESTDIR, and the Debian package of
// make deb installed into a throwaway root.
package install

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const repo = "../.."

// binDir returns the directory of the built binaries, or skips.
func binDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CDI_TEST_BIN_DIR")
	if dir == "" {
		t.Skip("CDI_TEST_BIN_DIR is not set: run `make test`, which builds the binaries first")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	return dir
}

// names lists the directories under repo/dir: the binaries built from it.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(repo, dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		t.Fatalf("nothing in %s", dir)
	}
	return out
}

// runMake runs a target of the repository's Makefile without rebuilding the
// binaries (other test packages run them concurrently) and returns its
// output.
func runMake(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", repo, "-o", "build", "BIN=" + bin}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// tree lists every file and symlink under root (directories only when
// empty) with its mode, relative to root.
func tree(t *testing.T, root string) map[string]fs.FileMode {
	t.Helper()
	out := map[string]fs.FileMode{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if sub, _ := os.ReadDir(p); len(sub) > 0 {
				return nil
			}
			rel += "/"
		}
		out[rel] = info.Mode().Perm()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func checkTree(t *testing.T, step, root string, want map[string]fs.FileMode) {
	t.Helper()
	got := tree(t, root)
	for p, m := range want {
		if g, ok := got[p]; !ok || g != m {
			t.Errorf("%s: %s: got mode %v (present %v), want %v", step, p, g, ok, m)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: unexpected %s", step, p)
		}
	}
}

// make install puts the plugins in PREFIX/bin and the tools in BINPREFIX;
// install-conf adds the shipped configs without overwriting and says what
// it skipped; uninstall takes back exactly the binaries, never configs,
// state, or another package's plugin.
func TestMakeInstall(t *testing.T) {
	bin := binDir(t)
	plugins, tools := names(t, "plugins"), names(t, "cmd")
	tests := []struct {
		name                        string
		vars                        []string
		pluginDir, toolDir, confDir string
	}{
		{"defaults", nil, "opt/cdi/bin", "usr/local/bin", "etc/cdi"},
		{"custom", []string{"PREFIX=/usr/lib/cdi", "BINPREFIX=/usr/sbin", "CONFDIR=/etc/cdi-test"}, "usr/lib/cdi/bin", "usr/sbin", "etc/cdi-test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dest := t.TempDir()
			mk := func(target string) string {
				return runMake(t, bin, append([]string{target, "DESTDIR=" + dest}, tt.vars...)...)
			}
			mk("install")
			want := map[string]fs.FileMode{}
			for _, p := range plugins {
				want[filepath.Join(tt.pluginDir, p)] = 0o755
			}
			for _, p := range tools {
				want[filepath.Join(tt.toolDir, p)] = 0o755
			}
			checkTree(t, "install", dest, want)
			for p := range want {
				got, _ := os.ReadFile(filepath.Join(dest, p))
				built, _ := os.ReadFile(filepath.Join(bin, filepath.Base(p)))
				if len(got) == 0 || !bytes.Equal(got, built) {
					t.Errorf("%s is not the built binary", p)
				}
			}

			// An operator's own tty config is there already.
			mine := filepath.Join(dest, tt.confDir, "tty.d/generic-tty.conf")
			writeFile(t, mine, "mine")
			out := mk("install-conf")
			gpu := filepath.Join(dest, tt.confDir, "gpu.d/drm.conf")
			if !strings.Contains(out, "skipped "+mine+": it exists") || !strings.Contains(out, "installed "+gpu) {
				t.Errorf("install-conf did not say what it did:\n%s", out)
			}
			out = mk("install-conf")
			if strings.Count(out, "skipped ") != 2 || strings.Contains(out, "installed") {
				t.Errorf("second install-conf:\n%s", out)
			}
			if b, _ := os.ReadFile(mine); string(b) != "mine" {
				t.Errorf("install-conf overwrote %s: %q", mine, b)
			}
			shipped, _ := os.ReadFile(filepath.Join(repo, "conf/gpu.d/drm.conf"))
			if b, _ := os.ReadFile(gpu); !bytes.Equal(b, shipped) {
				t.Errorf("%s is not conf/gpu.d/drm.conf", gpu)
			}
			want[filepath.Join(tt.confDir, "tty.d/generic-tty.conf")] = 0o600
			want[filepath.Join(tt.confDir, "gpu.d/drm.conf")] = 0o644
			checkTree(t, "install-conf", dest, want)

			// State, and a plugin of another package beside ours.
			writeFile(t, filepath.Join(dest, "var/lib/cdi/drm.db"), "state")
			other := filepath.Join(tt.pluginDir, "other-plugin")
			writeFile(t, filepath.Join(dest, other), "#!/bin/sh")
			mk("uninstall")
			left := map[string]fs.FileMode{
				filepath.Join(tt.confDir, "tty.d/generic-tty.conf"): 0o600,
				filepath.Join(tt.confDir, "gpu.d/drm.conf"):         0o644,
				"var/lib/cdi/drm.db":                                0o600,
				other:                                               0o600,
				tt.toolDir + "/":                                    0o755,
			}
			checkTree(t, "uninstall", dest, left)

			// Once ours were the only plugins, the plugin dir goes too.
			if err := os.Remove(filepath.Join(dest, other)); err != nil {
				t.Fatal(err)
			}
			mk("uninstall")
			delete(left, other)
			left[filepath.Dir(filepath.Dir(tt.pluginDir))+"/"] = 0o755 // opt/ or usr/lib/
			checkTree(t, "uninstall again", dest, left)
		})
	}
}

// The example configs are never installed by install-conf.
func TestInstallConfSkipsExamples(t *testing.T) {
	bin := binDir(t)
	dest := t.TempDir()
	runMake(t, bin, "install-conf", "DESTDIR="+dest)
	var got []string
	for p := range tree(t, dest) {
		got = append(got, p)
	}
	slices.Sort(got)
	want := []string{"etc/cdi/gpu.d/drm.conf", "etc/cdi/tty.d/generic-tty.conf"}
	if !slices.Equal(got, want) {
		t.Errorf("installed %v, want %v", got, want)
	}
}
