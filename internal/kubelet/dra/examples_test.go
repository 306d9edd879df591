package dra

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/cdi-exec/plugins/test/fixture"
	"github.com/cdi-exec/plugins/test/manifests"
)

// selector is the one form of CEL selector the examples use, read here:
// device.attributes["DOMAIN"].NAME == VALUE.
var selector = regexp.MustCompile(`^device\.attributes\["([^"]+)"\]\.(\w+) == (.+)$`)

// The GPU claims of deploy/example/gpus.yaml against the dgx-h100 fixture
// host and its published slice: each selector names an attribute the
// driver publishes, with a value that picks the GPUs the example says
// (NUMA node 1: four; PCIe root pci0000:40: two; switch 0000:c1:00.0:
// two); the two-GPU claim finds pairs under one switch; and each claim,
// allocated GPUs it selects with its own config, prepares: the render-only
// claim gets no primary node. (The scheduler's CEL is not run here: the
// test reads only the form above and fails on any other.)
func TestExampleGPUClaims(t *testing.T) {
	h, ok := fixture.Named("dgx-h100")
	if !ok {
		t.Fatal("no dgx-h100 fixture host")
	}
	n := newNode(t, h, map[string]string{"gpu.d/drm.conf": gpuConf})
	opt := n.options()
	opt.Types = []string{"gpu"}
	n.start(opt)
	var devices []resourceapi.Device
	n.eventually("the GPU slice", func() error {
		devices = nil
		for _, s := range n.slices(gpuDriver) {
			devices = append(devices, s.Spec.Devices...)
		}
		if len(devices) != 8 {
			return fmt.Errorf("%d devices published", len(devices))
		}
		return nil
	})
	objs, err := manifests.Load("../../../deploy/example/gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"gpu-numa1": 4, "gpu-pcie-root": 2, "gpu-pcie-switch": 2, "two-gpus-one-switch": 8, "gpu-render-only": 8}
	seen := 0
	for i, o := range objs {
		tmpl, ok := o.Obj.(*resourceapi.ResourceClaimTemplate)
		if !ok {
			continue
		}
		seen++
		spec := tmpl.Spec.Spec.Devices
		if len(spec.Requests) != 1 || spec.Requests[0].Exactly == nil || spec.Requests[0].Exactly.DeviceClassName != gpuDriver {
			t.Fatalf("%s: requests %+v", tmpl.Name, spec.Requests)
		}
		req := spec.Requests[0]
		candidates := slices.Clone(devices)
		for _, sel := range req.Exactly.Selectors {
			candidates = slices.DeleteFunc(candidates, func(d resourceapi.Device) bool { return !matches(t, sel.CEL.Expression, d) })
		}
		if len(candidates) != want[tmpl.Name] {
			t.Fatalf("%s selects %d of the host's GPUs, want %d", tmpl.Name, len(candidates), want[tmpl.Name])
		}
		count := max(int(req.Exactly.Count), 1)
		for _, c := range spec.Constraints {
			candidates = sameValue(t, tmpl.Name, candidates, *c.MatchAttribute, count)
		}
		var results []resourceapi.DeviceRequestAllocationResult
		for _, d := range candidates[:count] {
			results = append(results, resourceapi.DeviceRequestAllocationResult{Request: req.Name, Driver: gpuDriver, Pool: nodeName, Device: d.Name})
		}
		var configs []resourceapi.DeviceAllocationConfiguration
		for _, c := range spec.Config {
			configs = append(configs, resourceapi.DeviceAllocationConfiguration{Source: resourceapi.AllocationConfigSourceClaim, Requests: c.Requests, DeviceConfiguration: c.DeviceConfiguration})
		}
		claim := n.allocatedClaim(tmpl.Name, uid(100+i), results, configs...)
		got := n.prepare(gpuDriver, claim)
		if got.Error != "" {
			t.Fatalf("%s: prepare: %s", tmpl.Name, got.Error)
		}
		nodes := n.specNodes(cdiOf(t, got.Devices, req.Name))
		cards := slices.ContainsFunc(nodes, func(p string) bool { return strings.HasPrefix(p, "/dev/dri/card") })
		renders := slices.ContainsFunc(nodes, func(p string) bool { return strings.HasPrefix(p, "/dev/dri/renderD") })
		if !renders || cards == (len(spec.Config) > 0) {
			t.Errorf("%s (config %d) gets %v", tmpl.Name, len(spec.Config), nodes)
		}
		t.Logf("%s: %v get %v", tmpl.Name, results, nodes)
		if r := n.unprepare(gpuDriver, claim); r.Error != "" {
			t.Fatal(r.Error)
		}
	}
	if seen != len(want) {
		t.Fatalf("%d claim templates in gpus.yaml, want %d", seen, len(want))
	}
}

// matches reports whether the device has the attribute value expr names.
func matches(t *testing.T, expr string, d resourceapi.Device) bool {
	t.Helper()
	m := selector.FindStringSubmatch(expr)
	if m == nil {
		t.Fatalf("the test reads no selector of the form %q", expr)
	}
	name := resourceapi.QualifiedName(m[2])
	if m[1] != gpuDriver {
		name = resourceapi.QualifiedName(m[1] + "/" + m[2])
	}
	a, ok := d.Attributes[name]
	if !ok {
		t.Fatalf("%q: the driver publishes no attribute %s (device %s has %v)", expr, name, d.Name, d.Attributes)
	}
	switch {
	case a.IntValue != nil:
		v, err := strconv.ParseInt(m[3], 10, 64)
		return err == nil && *a.IntValue == v
	case a.StringValue != nil:
		v, err := strconv.Unquote(m[3])
		return err == nil && *a.StringValue == v
	}
	t.Fatalf("%q: attribute %s is neither int nor string", expr, name)
	return false
}

// sameValue returns the first group of count devices that share the
// attribute's value, in the order of devices; it fails the test when
// there is none.
func sameValue(t *testing.T, claim string, devices []resourceapi.Device, attr resourceapi.FullyQualifiedName, count int) []resourceapi.Device {
	t.Helper()
	domain, name, _ := strings.Cut(string(attr), "/")
	key := resourceapi.QualifiedName(name)
	if domain != gpuDriver {
		key = resourceapi.QualifiedName(attr)
	}
	groups := map[string][]resourceapi.Device{}
	var order []string
	for _, d := range devices {
		a, ok := d.Attributes[key]
		if !ok || a.StringValue == nil {
			continue
		}
		if _, ok := groups[*a.StringValue]; !ok {
			order = append(order, *a.StringValue)
		}
		groups[*a.StringValue] = append(groups[*a.StringValue], d)
	}
	for _, v := range order {
		if len(groups[v]) >= count {
			return groups[v]
		}
	}
	t.Fatal(errors.New(claim + ": no " + fmt.Sprint(count) + " devices share " + string(attr)))
	return nil
}
