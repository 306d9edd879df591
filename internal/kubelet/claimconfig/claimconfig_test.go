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
	card := `{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "want_device_nodes": ["card"]}`
	claim := func(cs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{}
		c.Status.Allocation = &resourceapi.AllocationResult{}
		c.Status.Allocation.Devices.Config = cs
		return c
	}
	// The claim's config comes after the class's and wins.
	s, err := ForClaim(claim(opaque(resourceapi.AllocationConfigSourceClass, nil, driver, card),
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

func TestApply(t *testing.T) {
	s := Settings{"want_device_nodes": json.RawMessage(`["render"]`)}
	out, err := s.Apply([]byte(`{"cdiVersion": "0.0.2", "type": "gpu", "plugin": "drm", "args": {"want_device_nodes": ["card", "render"], "numa_policy": "strict"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var conf struct{ Args map[string]json.RawMessage }
	if err := json.Unmarshal(out, &conf); err != nil || string(conf.Args["want_device_nodes"]) != `["render"]` || string(conf.Args["numa_policy"]) != `"strict"` {
		t.Fatalf("Apply = %s, %v", out, err)
	}
	if out, err := s.Apply([]byte(`{"type": "gpu", "args": null}`)); err != nil || !strings.Contains(string(out), `"want_device_nodes":["render"]`) {
		t.Fatalf("Apply without args = %s, %v", out, err)
	}
}
