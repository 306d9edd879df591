package main

import (
	"errors"
	"testing"

	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/caller"
)

// Which config answers for an id's allocations: the record's own types,
// a delegate's copy under the delegating plugin, a type no config serves
// under the plugin's first config, and what the stores said nothing
// about as the plugin answered.
func TestHoldersAnswers(t *testing.T) {
	rec := func(id string, als ...store.Allocation) *store.Record {
		return &store.Record{ID: id, Type: als[0].Type(), Allocations: als}
	}
	al := func(spec, delegate string) store.Allocation {
		return store.Allocation{Spec: spec, Amount: 1, Delegate: delegate}
	}
	h := holders{
		views: []storeView{
			{Plugin: "generic", Records: map[string]*store.Record{
				"sandbox": rec("sandbox", al("kvm", ""), al("fuse", ""), al("tun", "")),
				"vm":      rec("vm", al("kvm", "")),
				"cam":     rec("cam", al("camera", "")), // camera.d was removed
			}},
			{Plugin: "drm", Records: map[string]*store.Record{
				"pod": rec("pod", al("gpu", ""), al("vgpu", "")),
				"vf":  rec("vf", al("vgpu", "")),
			}},
			{Plugin: "sriov", Records: map[string]*store.Record{
				"pod": rec("pod", al("vgpu", "drm")),
				"vf":  rec("vf", al("vgpu", "drm")),
			}},
			{Plugin: "broken", Err: errors.New("unreadable")},
		},
		confs: []caller.Config{
			{File: "fuse.d/a.conf", Type: "fuse", Plugin: "generic"},
			{File: "gpu.d/a.conf", Type: "gpu", Plugin: "drm"},
			{File: "kvm.d/a.conf", Type: "kvm", Plugin: "generic"},
			{File: "tun.d/a.conf", Type: "tun", Plugin: "generic"},
			{File: "vgpu.d/a.conf", Type: "vgpu", Plugin: "sriov"},
			{File: "x.d/a.conf", Type: "x", Plugin: "broken"},
		},
	}
	conf := func(typ string) caller.Config {
		for _, c := range h.confs {
			if c.Type == typ {
				return c
			}
		}
		t.Fatalf("no config of %s", typ)
		return caller.Config{}
	}
	tests := []struct {
		typ, id     string
		yes, known  bool
		description string
	}{
		{"kvm", "sandbox", true, true, "the record's first type"},
		{"fuse", "sandbox", true, true, "a type beside the first"},
		{"tun", "sandbox", true, true, "a type beside the first"},
		{"fuse", "vm", false, true, "the plugin's first config, the id held kvm only"},
		{"kvm", "vm", true, true, "kvm only"},
		{"fuse", "cam", true, true, "a type no config serves: the plugin's first config"},
		{"kvm", "cam", false, true, "a type no config serves: not a later config"},
		{"gpu", "pod", true, true, "drm's own gpu beside sriov's vgpu"},
		{"gpu", "vf", false, true, "drm's record holds only sriov's vgpu"},
		{"vgpu", "vf", true, true, "sriov's own"},
		{"vgpu", "pod", true, true, "sriov's own"},
		{"kvm", "nobody", false, false, "no record: the plugin's answer stands"},
		{"x", "any", false, false, "an unreadable store: the plugin's answer stands"},
	}
	for _, tt := range tests {
		yes, known := h.answers(conf(tt.typ), tt.id)
		if yes != tt.yes || known != tt.known {
			t.Errorf("%s config, id %s (%s): answers %v, %v; want %v, %v", tt.typ, tt.id, tt.description, yes, known, tt.yes, tt.known)
		}
	}
	if got := h.delegateOf("drm", "pod", "vgpu"); got != "sriov" {
		t.Errorf("delegateOf(drm, pod, vgpu) = %q, want sriov", got)
	}
	if got := h.delegateOf("drm", "pod", "gpu"); got != "" {
		t.Errorf("delegateOf(drm, pod, gpu) = %q, want none", got)
	}
}

// gc lists each freed id under the configs whose type it held; an id the
// stores said nothing about stays where the plugin reported it.
func TestAttributeFreed(t *testing.T) {
	confs := []caller.Config{
		{File: "fuse.d/a.conf", Type: "fuse", Plugin: "generic"},
		{File: "kvm.d/a.conf", Type: "kvm", Plugin: "generic"},
	}
	h := holders{views: []storeView{{Plugin: "generic", Records: map[string]*store.Record{
		"vm":      {ID: "vm", Type: "kvm", Allocations: []store.Allocation{{Spec: "kvm", Amount: 1}}},
		"sandbox": {ID: "sandbox", Type: "kvm", Allocations: []store.Allocation{{Spec: "kvm", Amount: 1}, {Spec: "fuse", Amount: 1}}},
	}}}, confs: confs}
	out := []gcEntry{
		{outcome: outcome{File: confs[0].File, Type: "fuse", Plugin: "generic"}, Freed: []string{"new", "sandbox", "vm"}},
		{outcome: outcome{File: confs[1].File, Type: "kvm", Plugin: "generic"}, Freed: []string{}},
	}
	attributeFreed(h, confs, out)
	if got := out[0].Freed; len(got) != 2 || got[0] != "new" || got[1] != "sandbox" {
		t.Errorf("fuse: %v, want [new sandbox]", got)
	}
	if got := out[1].Freed; len(got) != 2 || got[0] != "sandbox" || got[1] != "vm" {
		t.Errorf("kvm: %v, want [sandbox vm]", got)
	}
}
