package cdispec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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

func TestFromArgs(t *testing.T) {
	tests := []struct {
		args string
		kind string // "" for no cdi_spec
		ok   bool
	}{
		{``, "", true},
		{`{}`, "", true},
		{`{"num_system_reserved":12}`, "", true},
		{`{"cdi_spec":{"kind":"example.com/tty"}}`, "example.com/tty", true},
		{`{"cdi_spec":{"kind":"tty"}}`, "", false},
		{`{"cdi_spec":null}`, "", false},
		{`[]`, "", false},
	}
	for _, tt := range tests {
		c, err := FromArgs([]byte(tt.args))
		kind := ""
		if c != nil {
			kind = c.Kind
		}
		if (err == nil) != tt.ok || kind != tt.kind {
			t.Errorf("FromArgs(%s) = %+v, %v", tt.args, c, err)
		}
	}
}
