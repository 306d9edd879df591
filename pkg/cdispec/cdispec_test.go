package cdispec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tags.cncf.io/container-device-interface/pkg/parser"
)

func TestParse(t *testing.T) {
	tests := []struct {
		raw string
		ok  bool
		dir string
	}{
		{`{"kind":"example.com/gpu"}`, true, DefaultDir},
		{`{"kind":"example.com/gpu","dir":"/etc/cdi"}`, true, "/etc/cdi"},
		{`{"kind":"example.com/gpu","dir":"relative"}`, false, ""},
		{`{"kind":"gpu"}`, false, ""},
		{`{"kind":"example.com/gpu-"}`, false, ""},
		{`{"kind":"example.com/g/pu"}`, false, ""},
		{`{"kind":"example.com/gpu","extra":1}`, false, ""},
		{`{}`, false, ""},
		{`[]`, false, ""},
	}
	for _, tt := range tests {
		c, err := Parse([]byte(tt.raw))
		if (err == nil) != tt.ok || err == nil && c.Dir != tt.dir {
			t.Errorf("Parse(%s) = %+v, %v", tt.raw, c, err)
		}
	}
}

// Every request-id maps to a valid, distinct CDI device name.
func TestDeviceName(t *testing.T) {
	seen := map[string]string{}
	for _, id := range []string{"a", "1234", "pod-a", "pod-a-", "pod-a--", "x-", "9"} {
		name := DeviceName(id)
		if err := parser.ValidateDeviceName(name); err != nil {
			t.Errorf("%q -> %q: %v", id, name, err)
		}
		if prev, dup := seen[name]; dup {
			t.Errorf("%q and %q both map to %q", prev, id, name)
		}
		seen[name] = id
	}
}

func TestWriteRemove(t *testing.T) {
	c := &Config{Kind: "example.com/gpu", Dir: filepath.Join(t.TempDir(), "cdi")}
	if err := c.Write("r1", []Node{{Path: "/dev/dri/card0", Type: "c", Major: 226}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(c.Path("r1"))
	if err != nil || !strings.Contains(string(b), `"cdiVersion": "0.3.0"`) {
		t.Fatalf("%s %v", b, err)
	}
	ids, err := c.Orphans(func(string) bool { return false })
	if err != nil || len(ids) != 1 || ids[0] != "r1" {
		t.Fatalf("orphans: %v %v", ids, err)
	}
	if err := c.Remove("r1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove("r1"); err != nil {
		t.Fatal("removing a missing spec failed:", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`{"kind":"example.com/gpu","dir":"/x"}`)
	f.Add(`{"kind":"a/b"}`)
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := Parse([]byte(raw))
		if err != nil {
			return
		}
		vendor, class := parser.ParseQualifier(c.Kind)
		if parser.ValidateVendorName(vendor) != nil || parser.ValidateClassName(class) != nil || !filepath.IsAbs(c.Dir) {
			t.Fatalf("accepted %+v", c)
		}
	})
}

// Orphans removes this kind's temporary files once they are stale, and no
// other file.
func TestOrphansSweepsStaleTemps(t *testing.T) {
	c := &Config{Kind: "example.com/gpu", Dir: t.TempDir()}
	old := time.Now().Add(-time.Hour)
	files := map[string]bool{ // name → still there afterwards
		".tmp-example.com-gpu_123":   false,
		".tmp-example.com-gpu_456":   true, // fresh: a writer may be busy with it
		".tmp-other.com-gpu_789":     true, // another kind's
		"example.com-gpu_a.json":     true,
		".tmp-example.com-gpu_dir/x": true, // a directory is not litter of ours
	}
	for name := range files {
		p := filepath.Join(c.Dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if name != ".tmp-example.com-gpu_456" {
			if err := os.Chtimes(filepath.Dir(p), old, old); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	ids, err := c.Orphans(func(string) bool { return true })
	if err != nil || len(ids) != 0 {
		t.Fatalf("%v %v", ids, err)
	}
	for name, want := range files {
		if _, err := os.Stat(filepath.Join(c.Dir, name)); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", name, err == nil, want)
		}
	}
}
