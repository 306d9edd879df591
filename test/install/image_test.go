package install

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// make image builds from a staged context of the binaries and their
// licenses only: a .deb (or anything else) in bin/ stays out. PODMAN is a
// script that lists the context it is given and its Containerfile's
// COPY lines, so no image store is touched.
func TestImageContext(t *testing.T) {
	src := binDir(t)
	bin := t.TempDir()
	var want []string
	for _, dir := range []string{"plugins", "cmd"} {
		for _, name := range names(t, dir) {
			b, err := os.ReadFile(filepath.Join(src, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(bin, name), b, 0o755); err != nil {
				t.Fatal(err)
			}
			want = append(want, "bin/"+name)
		}
	}
	// What make deb leaves in bin/.
	if err := os.MkdirAll(filepath.Join(bin, "deb"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "deb", "cdi-exec-plugins_1_amd64.deb"), []byte("a package"), 0o644); err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(t.TempDir(), "context")
	podman := filepath.Join(t.TempDir(), "podman")
	// The context is the last argument.
	script := "#!/bin/sh\nfor last; do :; done\ncd \"$last\" && find . -type f | sort > " + list + "\n"
	if err := os.WriteFile(podman, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	runMake(t, bin, "image", "PODMAN="+podman)
	b, err := os.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	var got, licenses []string
	for l := range strings.Lines(string(b)) {
		l = strings.TrimPrefix(strings.TrimSpace(l), "./")
		if strings.HasPrefix(l, "licenses/") {
			licenses = append(licenses, l)
			continue
		}
		got = append(got, l)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("context outside licenses/: %v, want %v", got, want)
	}
	for _, f := range []string{"licenses/LICENSE", "licenses/NOTICE", "licenses/third-party/go.etcd.io/bbolt/LICENSE", "licenses/third-party/github.com/spf13/cobra/LICENSE.txt"} {
		if !slices.Contains(licenses, f) {
			t.Errorf("context lacks %s: %v", f, licenses)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(bin, "image-stage")); len(entries) != 0 {
		t.Errorf("the staged context is left behind: %v", entries)
	}
	cf, err := os.ReadFile(filepath.Join(repo, "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, copyLine := range []string{"COPY bin/ /opt/cdi/bin/\n", "COPY licenses/ /usr/share/doc/cdi-exec-plugins/\n"} {
		if !strings.Contains(string(cf), copyLine) {
			t.Errorf("Containerfile lacks %q", copyLine)
		}
	}
}
