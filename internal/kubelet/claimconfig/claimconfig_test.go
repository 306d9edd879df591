package claimconfig

import (
	"encoding/json"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestParse(t *testing.T) {
	drm := []string{"drm"}
	ok, err := Parse([]byte(`{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "want_device_nodes": ["render"]}`), drm)
	if err != nil || string(ok["want_device_nodes"]) != `["render"]` || len(ok) != 1 {
		t.Fatalf("Parse = %v, %v", ok, err)
	}
	for name, tt := range map[string]struct {
		raw     string
		plugins []string
		field   string // the error must name it
	}{
		"misspelt":          {`{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "want_device_node": ["render"]}`, drm, `"want_device_node"`},
		"not per claim":     {`{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "pci_addresses": ["0000:01:00.0"]}`, drm, `"pci_addresses"`},
		"not for this type": {`{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "want_device_nodes": ["render"]}`, []string{"generic-tty"}, `"want_device_nodes"`},
		"duplicate":         {`{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "want_device_nodes": [], "want_device_nodes": ["render"]}`, drm, "want_device_nodes"},
		"case":              {`{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "Want_Device_Nodes": ["render"]}`, drm, "Want_Device_Nodes"},
		"kind":              {`{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "GpuConfig"}`, drm, `"kind"`},
		"no kind":           {`{"apiVersion": "cdi-exec.io/v1alpha1"}`, drm, `"kind"`},
		"apiVersion":        {`{"apiVersion": "cdi-exec.io/v1", "kind": "DeviceConfig"}`, drm, `"apiVersion"`},
		"not an object":     {`["render"]`, drm, "DeviceConfig"},
	} {
		_, err := Parse([]byte(tt.raw), tt.plugins)
		if err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: Parse(%s) = %v, want an error naming %s", name, tt.raw, err, tt.field)
		}
	}
}

func opaque(src resourceapi.AllocationConfigSource, requests []string, driver, params string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{Source: src, Requests: requests, DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}},
	}}
}

func TestForClaim(t *testing.T) {
	const driver = "gpu.cdi-exec.io"
	render := `{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "want_device_nodes": ["render"]}`
	both := `{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "want_device_nodes": ["primary", "render"]}`
	claim := func(cs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{}
		c.Status.Allocation = &resourceapi.AllocationResult{}
		c.Status.Allocation.Devices.Config = cs
		return c
	}
	// The claim's config comes after the class's and wins, within it.
	s, err := ForClaim(claim(opaque(resourceapi.AllocationConfigSourceClass, nil, driver, both),
		opaque(resourceapi.AllocationConfigSourceClaim, []string{"g"}, driver, render),
		opaque(resourceapi.AllocationConfigSourceClaim, nil, "other.example.com", `{"x": 1}`)), driver, []string{"drm"}, []string{"g/sub"})
	if err != nil || string(s["want_device_nodes"]) != `["render"]` {
		t.Fatalf("ForClaim = %v, %v", s, err)
	}
	// Two requests of one claim with different settings cannot share an ADD.
	_, err = ForClaim(claim(opaque(resourceapi.AllocationConfigSourceClaim, []string{"a"}, driver, render)), driver, []string{"drm"}, []string{"a", "b"})
	if err == nil || !strings.Contains(err.Error(), `"a" and "b"`) {
		t.Fatalf("different settings per request: %v", err)
	}
	// A bad config fails however it is scoped.
	_, err = ForClaim(claim(opaque(resourceapi.AllocationConfigSourceClaim, []string{"other"}, driver, `{"kind": "DeviceConfig"}`)), driver, []string{"drm"}, []string{"a"})
	if err == nil || !strings.Contains(err.Error(), "apiVersion") {
		t.Fatalf("bad config: %v", err)
	}
}

// TestForClaimLimit: a DeviceClass's config is the upper limit of a
// claim's; null in the claim's sets nothing (the class's value stays, or
// the node's applies).
func TestForClaimLimit(t *testing.T) {
	const driver = "gpu.cdi-exec.io"
	cfg := func(v string) string {
		return `{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "want_device_nodes": ` + v + `}`
	}
	class := func(v string) resourceapi.DeviceAllocationConfiguration {
		return opaque(resourceapi.AllocationConfigSourceClass, nil, driver, cfg(v))
	}
	own := func(v string) resourceapi.DeviceAllocationConfiguration {
		return opaque(resourceapi.AllocationConfigSourceClaim, nil, driver, cfg(v))
	}
	for name, tt := range map[string]struct {
		configs []resourceapi.DeviceAllocationConfiguration
		want    string // the setting; "" none
		err     string // the error names it
	}{
		"within the class":        {[]resourceapi.DeviceAllocationConfiguration{class(`["primary", "render"]`), own(`["render"]`)}, `["render"]`, ""},
		"beyond the class":        {[]resourceapi.DeviceAllocationConfiguration{class(`["render"]`), own(`["primary", "render"]`)}, "", `field "want_device_nodes"`},
		"empty":                   {[]resourceapi.DeviceAllocationConfiguration{class(`["render"]`), own(`[]`)}, "", `field "want_device_nodes"`},
		"twice":                   {[]resourceapi.DeviceAllocationConfiguration{class(`["render"]`), own(`["render", "render"]`)}, "", `field "want_device_nodes"`},
		"not a list":              {[]resourceapi.DeviceAllocationConfiguration{class(`["render"]`), own(`"render"`)}, "", `field "want_device_nodes"`},
		"null keeps the class's":  {[]resourceapi.DeviceAllocationConfiguration{class(`["render"]`), own(`null`)}, `["render"]`, ""},
		"null alone sets nothing": {[]resourceapi.DeviceAllocationConfiguration{own(`null`)}, "", ""},
		"the claim's alone":       {[]resourceapi.DeviceAllocationConfiguration{own(`["primary"]`)}, `["primary"]`, ""},
		"the class's alone":       {[]resourceapi.DeviceAllocationConfiguration{class(`["render"]`)}, `["render"]`, ""},
	} {
		c := &resourceapi.ResourceClaim{}
		c.Status.Allocation = &resourceapi.AllocationResult{}
		c.Status.Allocation.Devices.Config = tt.configs
		s, err := ForClaim(c, driver, []string{"drm"}, []string{"g"})
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: ForClaim = %v, %v; want an error naming %s", name, s, err, tt.err)
			}
			continue
		}
		if err != nil || string(s["want_device_nodes"]) != tt.want {
			t.Errorf("%s: ForClaim = %v, %v; want want_device_nodes %s", name, s, err, tt.want)
		}
	}
}

// TestApplyLimit: the node's config, or the plugin's default where it
// sets nothing, is the upper limit of a claim's setting.
func TestApplyLimit(t *testing.T) {
	const render = `{"type": "gpu", "plugin": "drm", "args": {"want_device_nodes": ["render"]}}`
	const unset = `{"type": "gpu", "plugin": "drm"}`
	const null = `{"type": "gpu", "plugin": "drm", "args": {"want_device_nodes": null}}`
	for _, tt := range []struct {
		conf, value string
		ok          bool
	}{
		{render, `["render"]`, true},
		{render, `["primary", "render"]`, false},
		{render, `["primary"]`, false},
		{render, `[]`, false},
		{unset, `["primary", "render"]`, true},
		{unset, `["render"]`, true},
		{unset, `["control"]`, false},
		{null, `["control"]`, false},
		{null, `["primary"]`, true},
	} {
		s := Settings{"want_device_nodes": json.RawMessage(tt.value)}
		out, err := s.Apply("drm", []byte(tt.conf))
		if tt.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), `field "want_device_nodes"`) {
			t.Errorf("%s over %s: %s, %v", tt.value, tt.conf, out, err)
		}
	}
	// A setting that another plugin of the type takes leaves this one's
	// config as it is.
	s := Settings{"want_device_nodes": json.RawMessage(`["render"]`)}
	const tty = `{"type": "gpu", "plugin": "generic-tty"}`
	if out, err := s.Apply("generic-tty", []byte(tty)); err != nil || string(out) != tty {
		t.Errorf("Apply to another plugin = %s, %v", out, err)
	}
}

func TestApply(t *testing.T) {
	s := Settings{"want_device_nodes": json.RawMessage(`["render"]`)}
	out, err := s.Apply("drm", []byte(`{"cdiVersion": "0.0.2", "type": "gpu", "plugin": "drm", "args": {"want_device_nodes": ["primary", "render"], "numa_policy": "strict"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var conf struct{ Args map[string]json.RawMessage }
	if err := json.Unmarshal(out, &conf); err != nil || string(conf.Args["want_device_nodes"]) != `["render"]` || string(conf.Args["numa_policy"]) != `"strict"` {
		t.Fatalf("Apply = %s, %v", out, err)
	}
	if out, err := s.Apply("drm", []byte(`{"type": "gpu", "args": null}`)); err != nil || !strings.Contains(string(out), `"want_device_nodes":["render"]`) {
		t.Fatalf("Apply without args = %s, %v", out, err)
	}
}
