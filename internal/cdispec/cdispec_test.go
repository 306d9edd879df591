package cdispec

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	o := Owner{Plugin: "drm", Store: "00ff"}
	if err := c.Write(o, "r1", []Node{{Path: "/dev/dri/card0", Type: "c", Major: 226}}, nil); err != nil {
		t.Fatal(err)
	}
	if filepath.Base(c.Path(o, "r1")) != "example.com-gpu_r1_drm-00ff.json" {
		t.Fatalf("path %s", c.Path(o, "r1"))
	}
	b, err := os.ReadFile(c.Path(o, "r1"))
	if err != nil || !strings.Contains(string(b), `"cdiVersion": "0.3.0"`) {
		t.Fatalf("%s %v", b, err)
	}
	ids, err := c.Orphans(o, func(string) bool { return false })
	if err != nil || len(ids) != 1 || ids[0] != "r1" {
		t.Fatalf("orphans: %v %v", ids, err)
	}
	if err := c.Remove(o, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(o, "r1"); err != nil {
		t.Fatal("removing a missing spec failed:", err)
	}
}

// TestCraftedRequestID: a request-id with "/" or ".." (a crafted claim
// UID) never reaches a path: Write and Remove refuse it, and a file where
// it would have pointed outside the directory stays.
func TestCraftedRequestID(t *testing.T) {
	root := t.TempDir()
	c := &Config{Kind: "example.com/gpu", Dir: filepath.Join(root, "cdi")}
	o := Owner{Plugin: "drm", Store: "00ff"}
	if err := os.MkdirAll(filepath.Join(root, "victim"), 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(root, "victim", "pwn_drm-00ff.json")
	if err := os.WriteFile(victim, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"/../../victim/pwn", "../victim/pwn", "a/b", "..", ".", "a..b", "", "a_b", "a\x00b"} {
		if err := c.Remove(o, id); err == nil {
			t.Errorf("Remove(%q) = nil, want an error", id)
		}
		if err := c.Write(o, id, []Node{{Path: "/dev/dri/card0", Type: "c", Major: 226}}, nil); err == nil {
			t.Errorf("Write(%q) = nil, want an error", id)
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("the file outside the directory: %v", err)
	}
	var left []string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && path != victim {
			left = append(left, path)
		}
		return nil
	})
	if len(left) != 0 {
		t.Fatalf("files written: %v", left)
	}
}

// Two owners share a kind and a directory, beside a file nobody owns and
// another kind's: each sees, rewrites and removes only its own files, and
// neither takes a request-id whose device name is already defined.
func TestOwnership(t *testing.T) {
	dir := t.TempDir()
	c := &Config{Kind: "example.com/gpu", Dir: dir}
	a, b := Owner{Plugin: "drm", Store: "aa"}, Owner{Plugin: "drm", Store: "bb"}
	write := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	legacy := write("example.com-gpu_old.json")
	other := write("other.com-gpu_r2_drm-aa.json")
	nodes := []Node{{Path: "/dev/dri/card0", Type: "c", Major: 226}}
	for _, w := range []struct {
		o  Owner
		id string
	}{{a, "r1"}, {b, "r2"}, {a, "r1"}} { // the last is a rewrite
		if err := c.Write(w.o, w.id, nodes, nil); err != nil {
			t.Fatalf("%v writes %s: %v", w.o, w.id, err)
		}
	}
	none := func(string) bool { return false }
	for _, tt := range []struct {
		o    Owner
		want string
	}{{a, "r1"}, {b, "r2"}} {
		if ids, err := c.Orphans(tt.o, none); err != nil || strings.Join(ids, " ") != tt.want {
			t.Errorf("%v orphans = %v, %v; want %s", tt.o, ids, err, tt.want)
		}
	}
	for _, tt := range []struct {
		o  Owner
		id string
	}{{b, "r1"}, {a, "r2"}, {a, "old"}} {
		if err := c.Write(tt.o, tt.id, nodes, nil); !errors.Is(err, ErrForeign) {
			t.Errorf("%v writes %s over another's device name: %v", tt.o, tt.id, err)
		}
		if err := c.Remove(tt.o, tt.id); err != nil {
			t.Error(err)
		}
	}
	for _, p := range []string{legacy, other, c.Path(a, "r1"), c.Path(b, "r2")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := os.Stat(c.Path(b, "r1")); !os.IsNotExist(err) {
		t.Errorf("a refused write left its file: %v", err)
	}
	for _, bad := range []Owner{{}, {Plugin: "drm"}, {Plugin: "drm", Store: "XYZ"}, {Plugin: "a_b", Store: "aa"}, {Plugin: "../x", Store: "aa"}} {
		if err := c.Write(bad, "r9", nodes, nil); err == nil {
			t.Errorf("owner %+v accepted", bad)
		}
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

// Orphans removes the owner's temporary spec files once they are stale,
// and no other file: not a fresh one, not another owner's or another
// kind's, not a directory. Write names its temporary files so.
func TestOrphansSweepsStaleTemps(t *testing.T) {
	c := &Config{Kind: "example.com/gpu", Dir: t.TempDir()}
	o := Owner{Plugin: "drm", Store: "aa"}
	if got, _ := filepath.Match(c.tempPattern(o), ".tmp-example.com-gpu_123_drm-aa"); !got {
		t.Fatalf("pattern %q", c.tempPattern(o))
	}
	old := time.Now().Add(-time.Hour)
	files := map[string]bool{ // name → still there afterwards
		".tmp-example.com-gpu_123_drm-aa":   false,
		".tmp-example.com-gpu_456_drm-aa":   true, // fresh: a writer may be busy with it
		".tmp-example.com-gpu_789_drm-bb":   true, // another store's
		".tmp-other.com-gpu_789_drm-aa":     true, // another kind's
		"example.com-gpu_a_drm-aa.json":     true,
		".tmp-example.com-gpu_dir_drm-aa/x": true, // a directory is not litter
	}
	for name := range files {
		p := filepath.Join(c.Dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(name, "456") {
			for _, q := range []string{p, filepath.Dir(p)} {
				if err := os.Chtimes(q, old, old); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	ids, err := c.Orphans(o, func(string) bool { return true })
	if err != nil || len(ids) != 0 {
		t.Fatalf("%v %v", ids, err)
	}
	for name, want := range files {
		if _, err := os.Stat(filepath.Join(c.Dir, name)); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", name, err == nil, want)
		}
	}
}

func TestKeyDeviceName(t *testing.T) {
	for key, want := range map[string]string{
		"tty13":        "r1_tty13",
		"0000:03:00.0": "r1_0000:03:00.0",
		"ttyS0":        "r1_ttyS0",
		"a-":           "", // would end in "-": no entry of its own
		"a_":           "",
	} {
		if got := KeyDeviceName("r1", key); got != want {
			t.Errorf("KeyDeviceName(r1, %q) = %q, want %q", key, got, want)
		}
	}
}

// TestWriteDevices: the spec holds the request's device with every node,
// then one entry per device with a name of its own.
func TestWriteDevices(t *testing.T) {
	c := &Config{Kind: "example.com/gpu", Dir: t.TempDir()}
	o := Owner{Plugin: "drm", Store: "ab12"}
	card, render := Node{Path: "/dev/dri/card0", Type: "c", Major: 226}, Node{Path: "/dev/dri/renderD128", Type: "c", Major: 226, Minor: 128}
	devs := []Device{{Key: "0000:03:00.0", Nodes: []Node{card, render}}, {Key: "bad-", Nodes: []Node{card}}}
	if err := c.Write(o, "r1", []Node{card, render}, devs); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(c.Path(o, "r1"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Devices []struct {
			Name           string
			ContainerEdits struct{ DeviceNodes []struct{ Path string } }
		}
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range spec.Devices {
		got = append(got, fmt.Sprintf("%s:%d", d.Name, len(d.ContainerEdits.DeviceNodes)))
	}
	if want := []string{"r1:2", "r1_0000:03:00.0:2"}; !slices.Equal(got, want) {
		t.Fatalf("devices %v, want %v", got, want)
	}
	if names := c.QualifiedKeyNames("r1", devs); len(names) != 1 || names["0000:03:00.0"] != "example.com/gpu=r1_0000:03:00.0" {
		t.Fatalf("QualifiedKeyNames = %v", names)
	}
}

// FilePrefix starts the file of its request-id whoever owns it, and no
// other request's.
func TestFilePrefix(t *testing.T) {
	c := &Config{Kind: "example.com/gpu", Dir: "/run/cdi"}
	for _, tc := range []struct {
		id, owner string
		match     bool
	}{
		{"r1", "drm-00ff", true},
		{"r1", "generic-tty-ab", true},
		{"job-", "drm-00ff", true},
		{"r", "drm-00ff", false},
		{"r1-2", "drm-00ff", false},
	} {
		name := filepath.Base(c.Path(Owner{Plugin: strings.Split(tc.owner, "-")[0], Store: tc.owner[strings.LastIndex(tc.owner, "-")+1:]}, tc.id))
		for _, want := range []string{"r1", "job-"} {
			got := strings.HasPrefix(name, c.FilePrefix(want))
			if got != (tc.match && tc.id == want) {
				t.Errorf("%s starts with FilePrefix(%q) = %v", name, want, got)
			}
		}
	}
}

// dirNames lists dir, sorted; a missing one is empty.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// A Publication puts the spec in place under the caller's lock, whole,
// before Sync; Sync refuses a file of another owner that defines the
// request-id since; Withdraw takes back the written file only while it is
// still there, never a later writer's.
func TestPublication(t *testing.T) {
	a, b := Owner{Plugin: "drm", Store: "aa"}, Owner{Plugin: "drm", Store: "bb"}
	nodes := []Node{{Path: "/dev/dri/card0", Type: "c", Major: 226}}
	tests := []struct {
		name     string
		between  func(t *testing.T, c *Config) // after Write, before Sync: another command of the directory
		foreign  bool                          // Sync fails with ErrForeign
		withdraw bool                          // Withdraw removes the file
		left     []string                      // the directory at the end
	}{
		{name: "alone", between: func(*testing.T, *Config) {},
			withdraw: true, left: nil},
		{name: "another store writes the name", between: func(t *testing.T, c *Config) {
			if err := os.WriteFile(c.Path(b, "r1"), []byte("{}"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, foreign: true, withdraw: true, left: []string{"example.com-gpu_r1_drm-bb.json"}},
		{name: "a later write of the owner", between: func(t *testing.T, c *Config) {
			if err := c.Write(a, "r1", nil, nil); err != nil {
				t.Fatal(err)
			}
		}, withdraw: false, left: []string{"example.com-gpu_r1_drm-aa.json"}},
		{name: "removed since (a DEL)", between: func(t *testing.T, c *Config) {
			if err := c.Remove(a, "r1"); err != nil {
				t.Fatal(err)
			}
		}, withdraw: false, left: nil},
	}
	for _, tt := range tests {
		c := &Config{Kind: "example.com/gpu", Dir: filepath.Join(t.TempDir(), "cdi")}
		if tt.name != "alone" { // the directory there before, or made by Write
			if err := os.Mkdir(c.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		p := c.Stage()
		if err := p.Write(a, "r1", nodes, nil); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if b, err := os.ReadFile(c.Path(a, "r1")); err != nil || !strings.Contains(string(b), `"/dev/dri/card0"`) {
			t.Errorf("%s: the spec before Sync: %q, %v", tt.name, b, err)
		}
		tt.between(t, c)
		if err := p.Sync(); errors.Is(err, ErrForeign) != tt.foreign || !tt.foreign && err != nil {
			t.Errorf("%s: Sync = %v, want ErrForeign %v", tt.name, err, tt.foreign)
		}
		if ok, err := p.Withdraw(); ok != tt.withdraw || err != nil {
			t.Errorf("%s: Withdraw = %v, %v; want %v", tt.name, ok, err, tt.withdraw)
		}
		p.Close()
		if got := dirNames(t, c.Dir); !slices.Equal(got, tt.left) {
			t.Errorf("%s: the directory holds %v, want %v", tt.name, got, tt.left)
		}
	}
}

// Orphans of a Publication answers as Config.Orphans does, from the
// listing Write uses too; a Publication never written leaves nothing
// behind, and one refused leaves no file either.
func TestPublicationOrphans(t *testing.T) {
	c := &Config{Kind: "example.com/gpu", Dir: t.TempDir()}
	o := Owner{Plugin: "drm", Store: "aa"}
	for _, id := range []string{"held", "gone"} {
		if err := c.Write(o, id, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(c.Path(Owner{Plugin: "drm", Store: "bb"}, "taken"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := dirNames(t, c.Dir)
	p := c.Stage()
	p.Close()
	if got := dirNames(t, c.Dir); !slices.Equal(got, before) {
		t.Errorf("an unwritten publication left %v, was %v", got, before)
	}
	p = c.Stage()
	if err := p.Write(o, "taken", nil, nil); !errors.Is(err, ErrForeign) {
		t.Errorf("Write over another owner's device name: %v", err)
	}
	p.Close()
	if got := dirNames(t, c.Dir); !slices.Equal(got, before) {
		t.Errorf("a refused publication left %v, was %v", got, before)
	}
	p = c.Stage()
	defer p.Close()
	held := func(id string) bool { return id != "gone" }
	want, err := c.Orphans(o, held)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Orphans(o, held); err != nil || !slices.Equal(got, []string{"gone"}) || !slices.Equal(got, want) {
		t.Errorf("Orphans = %v, %v; Config.Orphans %v; want [gone]", got, err, want)
	}
	// Write answers from that listing: a file of another owner made
	// since is for Sync to find.
	if err := os.WriteFile(c.Path(Owner{Plugin: "drm", Store: "bb"}, "new"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Write(o, "new", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(); !errors.Is(err, ErrForeign) {
		t.Errorf("Sync with another owner's file of the request-id: %v", err)
	}
}
