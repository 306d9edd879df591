package dra

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/cdi-exec/plugins/test/kubelettest"
)

// TestSpecFilesPutBack: the spec files of the claims recorded as
// prepared (each device's, and the helper's metadata spec) come back,
// the same, when they go while the driver runs and when they went while
// it was away; a claim unprepared gets none back.
func TestSpecFilesPutBack(t *testing.T) {
	n := ttyNode(t)
	opt, reg := n.observed()
	opt.DeviceMetadata = true
	in := n.start(opt)
	kept := n.claim("kept", uid(11), ttyDriver, "tty14", "tty16")
	gone := n.claim("gone", uid(12), ttyDriver, "tty15")
	for _, c := range []*resourceapi.ResourceClaim{kept, gone} {
		if r := n.prepare(ttyDriver, c); r.Error != "" {
			t.Fatalf("prepare %s: %s", c.Name, r.Error)
		}
	}
	if r := n.unprepare(ttyDriver, gone); r.Error != "" {
		t.Fatal(r.Error)
	}
	want := n.specContents()
	if len(want) != 2 || !hasFile(want, "_metadata_"+uid(11)+"_r.json") {
		t.Fatalf("spec files after the prepares: %v", keysOf(want))
	}
	restored := func() float64 {
		return kubelettest.Metric(t, reg.Registry(), "cdi_exec_spec_files_restored_total", "driver", ttyDriver)
	}

	// While the driver runs: an operator empties the directory.
	if err := os.RemoveAll(n.specDir); err != nil {
		t.Fatal(err)
	}
	n.eventually("the spec files to be put back", func() error { return sameFiles(n.specContents(), want) })
	if got := restored(); got != 2 {
		t.Errorf("cdi_exec_spec_files_restored_total %v, want 2", got)
	}

	// While the driver was away.
	if err := in.shutdown(); err != nil {
		t.Fatal(err)
	}
	for name := range want {
		if err := os.Remove(name); err != nil {
			t.Fatal(err)
		}
	}
	opt, _ = n.observed()
	opt.DeviceMetadata = true
	n.start(opt)
	n.eventually("the spec files to be put back at start", func() error { return sameFiles(n.specContents(), want) })
	for k, h := range n.holders("tty") {
		if h == uid(12) {
			t.Errorf("%s is held again by the unprepared claim", k)
		}
	}
}

// specContents are the spec dir's files and their contents.
func (n *node) specContents() map[string]string {
	out := map[string]string{}
	files, _ := filepath.Glob(filepath.Join(n.specDir, "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil {
			out[f] = string(b)
		}
	}
	return out
}

func sameFiles(got, want map[string]string) error {
	for name, w := range want {
		if got[name] != w {
			return fmt.Errorf("%s: %q, want %q", filepath.Base(name), got[name], w)
		}
	}
	if len(got) != len(want) {
		return fmt.Errorf("files %v, want %v", keysOf(got), keysOf(want))
	}
	return nil
}

func hasFile(files map[string]string, suffix string) bool {
	return slices.ContainsFunc(keysOf(files), func(f string) bool { return strings.HasSuffix(f, suffix) })
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
