package cdispec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// Parse accepts container_edits that the CDI library accepts and refuses
// those it refuses, and members that are not env, mounts or hooks.
func TestParseEdits(t *testing.T) {
	for _, tt := range []struct {
		edits string
		ok    bool
	}{
		{`{}`, true},
		{`{"env":["LD_LIBRARY_PATH=/usr/local/nvidia/lib64","PATH=/usr/local/nvidia/bin:/usr/bin:/bin"]}`, true},
		{`{"mounts":[{"hostPath":"/usr/local/nvidia","containerPath":"/usr/local/nvidia","options":["ro","nosuid","nodev","bind"]}]}`, true},
		{`{"hooks":[{"hookName":"createContainer","path":"/usr/bin/nvidia-cdi-hook","args":["nvidia-cdi-hook","update-ldcache"]}]}`, true},
		{`{"env":["=x"]}`, false},
		{`{"env":["NOEQUALS"]}`, false},
		{`{"mounts":[{"hostPath":"","containerPath":"/x"}]}`, false},
		{`{"mounts":[{"hostPath":"/x"}]}`, false},
		{`{"mounts":[null]}`, false},
		{`{"hooks":[{"hookName":"prestartt","path":"/x"}]}`, false},
		{`{"hooks":[{"hookName":"prestart","path":""}]}`, false},
		{`{"hooks":[{"hookName":"prestart","path":"/x","env":["bad"]}]}`, false},
		{`{"deviceNodes":[{"path":"/dev/nvidia0"}]}`, false},
		{`{"mounts":[{"hostPath":"/x","containerPath":"/x","extra":1}]}`, false},
	} {
		_, err := Parse([]byte(`{"kind":"example.com/gpu","container_edits":` + tt.edits + `}`))
		if (err == nil) != tt.ok {
			t.Errorf("%s: %v", tt.edits, err)
		}
		if !tt.ok || err != nil {
			continue
		}
		var e Edits
		_ = json.Unmarshal([]byte(tt.edits), &e)
		spec := e.Spec()
		if lib := (&cdi.ContainerEdits{ContainerEdits: &spec}).Validate(); lib != nil {
			t.Errorf("%s: accepted here, refused by the CDI library: %v", tt.edits, lib)
		}
	}
}

// FuzzEdits: our rules and the CDI library's agree on any edits that
// decode.
func FuzzEdits(f *testing.F) {
	f.Add(`{"env":["A=b"],"mounts":[{"hostPath":"/a","containerPath":"/b"}],"hooks":[{"hookName":"prestart","path":"/h"}]}`)
	f.Add(`{"env":["=b"]}`)
	f.Fuzz(func(t *testing.T, raw string) {
		var e Edits
		if json.Unmarshal([]byte(raw), &e) != nil {
			return
		}
		for _, m := range e.Mounts {
			if m == nil {
				return // the library would dereference it
			}
		}
		for _, h := range e.Hooks {
			if h == nil {
				return
			}
		}
		spec := e.Spec()
		ours, lib := e.Validate(), (&cdi.ContainerEdits{ContainerEdits: &spec}).Validate()
		if (ours == nil) != (lib == nil) {
			t.Fatalf("%s: ours %v, the library's %v", raw, ours, lib)
		}
	})
}

// The edits go into the spec's top-level containerEdits, which the CDI
// library applies with any of its devices; a missing host path is found
// under the host root.
func TestWriteEdits(t *testing.T) {
	root := t.TempDir()
	c, err := Parse([]byte(`{"kind":"example.com/gpu","dir":"` + filepath.Join(root, "cdi") + `","container_edits":{"env":["A=b"],"mounts":[{"hostPath":"/usr/local/nvidia","containerPath":"/usr/local/nvidia","options":["ro","bind"]},{"hostPath":"tmpfs","containerPath":"/scratch","type":"tmpfs"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckHost(root); err == nil || !strings.Contains(err.Error(), "/usr/local/nvidia does not exist") {
		t.Fatalf("CheckHost without the directory: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "usr/local/nvidia"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckHost(root); err != nil {
		t.Fatalf("CheckHost: %v", err)
	}
	o := Owner{Plugin: "drm", Store: "ab12"}
	if err := c.Write(o, "r1", []Node{{Path: "/dev/nvidia0", Type: "c", Major: 195}}, []Device{{Key: "0000:00:06.0", Nodes: []Node{{Path: "/dev/nvidia0", Type: "c", Major: 195}}}}); err != nil {
		t.Fatal(err)
	}
	spec, err := cdi.ReadSpec(c.Path(o, "r1"), 0)
	if err != nil {
		t.Fatalf("the CDI library refuses the spec: %v", err)
	}
	edits := spec.ContainerEdits
	if len(edits.Env) != 1 || len(edits.Mounts) != 2 || edits.Mounts[0].HostPath != "/usr/local/nvidia" || len(spec.Devices) != 2 {
		t.Fatalf("spec: %+v", spec.Spec)
	}
}
