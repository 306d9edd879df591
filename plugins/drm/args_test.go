package main

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/pkg/protocol"
)

func TestArgs(t *testing.T) {
	tests := []struct {
		raw    string
		ok     bool
		strict bool
	}{
		{`{}`, true, false},
		{`{"want_device_nodes":["render","primary"],"vendorid_whitelist":["0X10DE"],"numa_policy":"strict"}`, true, true},
		{`{"pci_addresses":["0000:03:00.0"]}`, true, false},
		{`{"pci_addresses":["0000:03:00"]}`, false, false},
		{`{"want_device_nodes":[]}`, true, false},
		{`{"want_device_nodes":[],"companion_nodes":"none"}`, false, false},
		{`{"want_device_nodes":["card"]}`, false, false},
		{`{"want_device_types":["primary"]}`, false, false},
		{`{"deviceid_whitelist":["0x12345"]}`, false, false},
		{`{"numa_policy":"loose"}`, false, false},
		{`{"companion_nodes":"auto"}`, true, false},
		{`{"companion_nodes":"none"}`, true, false},
		{`{"companion_nodes":"all"}`, false, false},
		{`{"companion_nodes":true}`, false, false},
	}
	for _, tt := range tests {
		f, strict, err := decode(tt.raw)
		if (err == nil) != tt.ok || strict != tt.strict {
			t.Errorf("%s: %+v %v %v", tt.raw, f, strict, err)
		}
	}
}

// TestMode: the mode arg, and each shape of want_device_nodes with and
// without it. Without mode, an old config keeps the meaning its shape
// had; with it, a want_device_nodes that fits another mode is refused,
// naming both settings.
func TestMode(t *testing.T) {
	tests := []struct {
		args string
		mode string   // "" for refused
		want []string // DRM node kinds handed out
	}{
		// Without mode: the shapes of old configs, each as it was.
		{`{}`, modeDRM, []string{"primary", "render"}},
		{`{"want_device_nodes":null}`, modeDRM, []string{"primary", "render"}},
		{`{"want_device_nodes":["primary"]}`, modeDRM, []string{"primary"}},
		{`{"want_device_nodes":["render","primary","control"]}`, modeDRM, []string{"render", "primary", "control"}},
		{`{"want_device_nodes":[]}`, modeCompute, nil},
		{`{"want_device_nodes":["vfio"]}`, modeVFIO, nil},
		{`{"want_device_nodes":["iommufd"]}`, modeIOMMUFD, nil},
		{`{"want_device_nodes":["vfio","render"]}`, "", nil},
		{`{"want_device_nodes":["vfio","iommufd"]}`, "", nil},
		{`{"mode":"","want_device_nodes":[]}`, modeCompute, nil},
		{`{"want_device_nodes":[],"companion_nodes":"none"}`, "", nil},
		{`{"want_device_nodes":["card"]}`, "", nil},
		// mode "drm".
		{`{"mode":"drm"}`, modeDRM, []string{"primary", "render"}},
		{`{"mode":"drm","want_device_nodes":["render"]}`, modeDRM, []string{"render"}},
		{`{"mode":"drm","want_device_nodes":[]}`, "", nil},
		{`{"mode":"drm","want_device_nodes":["vfio"]}`, "", nil},
		{`{"mode":"drm","want_device_nodes":["iommufd"]}`, "", nil},
		{`{"mode":"drm","want_device_nodes":["render","vfio"]}`, "", nil},
		// mode "nvidia-compute".
		{`{"mode":"nvidia-compute"}`, modeCompute, nil},
		{`{"mode":"nvidia-compute","want_device_nodes":[]}`, modeCompute, nil},
		{`{"mode":"nvidia-compute","want_device_nodes":["primary"]}`, "", nil},
		{`{"mode":"nvidia-compute","want_device_nodes":["vfio"]}`, "", nil},
		{`{"mode":"nvidia-compute","companion_nodes":"none"}`, "", nil},
		// The VFIO modes.
		{`{"mode":"vfio"}`, modeVFIO, nil},
		{`{"mode":"vfio","want_device_nodes":["vfio"]}`, modeVFIO, nil},
		{`{"mode":"vfio","want_device_nodes":["iommufd"]}`, "", nil},
		{`{"mode":"vfio","want_device_nodes":[]}`, "", nil},
		{`{"mode":"vfio","want_device_nodes":["primary","render"]}`, "", nil},
		{`{"mode":"iommufd"}`, modeIOMMUFD, nil},
		{`{"mode":"iommufd","want_device_nodes":["iommufd"]}`, modeIOMMUFD, nil},
		{`{"mode":"iommufd","want_device_nodes":["vfio"]}`, "", nil},
		{`{"mode":"iommufd","want_device_nodes":["render"]}`, "", nil},
		// No such mode.
		{`{"mode":"compute"}`, "", nil},
		{`{"mode":"DRM"}`, "", nil},
		{`{"mode":["drm"]}`, "", nil},
	}
	for _, tt := range tests {
		f, _, err := decode(tt.args)
		if tt.mode == "" {
			if err == nil {
				t.Errorf("%s: accepted as %+v; want refused", tt.args, f)
				continue
			}
			// The error names every setting the config sets, and the
			// mode, set or not.
			for _, setting := range []string{"mode", "want_device_nodes", "companion_nodes"} {
				if (setting == "mode" || strings.Contains(tt.args, `"`+setting+`"`)) && !strings.Contains(err.Error(), setting) {
					t.Errorf("%s: %v; want an error naming %s", tt.args, err, setting)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.args, err)
			continue
		}
		var got string
		switch {
		case f.compute:
			got = modeCompute
		case f.vfio != "":
			got = f.vfio
		default:
			got = modeDRM
		}
		if got != tt.mode || !slices.Equal(f.want, tt.want) || f.compute && f.vfio != "" {
			t.Errorf("%s: mode %s, nodes %q (compute %v, vfio %q); want mode %s, nodes %q", tt.args, got, f.want, f.compute, f.vfio, tt.mode, tt.want)
		}
		if (got == modeDRM) != (sourceOf(&plugin{filter: f}) == nil) {
			t.Errorf("%s: mode %s has source %v", tt.args, got, sourceOf(&plugin{filter: f}))
		}
	}
}

func decode(raw string) (filter, bool, error) {
	var a args
	if err := (protocol.Config{Args: json.RawMessage(raw)}).DecodeArgs(&a); err != nil {
		return filter{}, false, err
	}
	return a.validate()
}

// FuzzArgs: any args either fail cleanly or give a filter whose node kinds
// are known and distinct.
func FuzzArgs(f *testing.F) {
	f.Add(`{"want_device_nodes":["render"],"vendorid_whitelist":["0x10de"]}`)
	f.Add(`{"pci_addresses":["0000:03:00.0"],"numa_policy":"strict"}`)
	f.Fuzz(func(t *testing.T, raw string) {
		fl, _, err := decode(raw)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, k := range fl.want {
			if seen[k] || k != "primary" && k != "render" && k != "control" {
				t.Fatalf("accepted want_device_nodes %v", fl.want)
			}
			seen[k] = true
		}
	})
}

func TestParseDeviceMinor(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"Model: \t\t NVIDIA H200\nBus Location: \t 0000:00:06.0\nDevice Minor: \t 0\nGPU Excluded:\t No\n", 0, true},
		{"Device Minor: 7\n", 7, true},
		{"Device Minor: 254\n", 0, false}, // nvidia-modeset's
		{"Device Minor: -1\n", 0, false},
		{"Device Minor: x\n", 0, false},
		{"Model: NVIDIA\n", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		if got, ok := parseDeviceMinor([]byte(tt.in)); got != tt.want || ok != tt.ok {
			t.Errorf("parseDeviceMinor(%q) = %d %v, want %d %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzDeviceMinor: a minor is only ever one the file states, below the
// driver's own 254.
func FuzzDeviceMinor(f *testing.F) {
	f.Add([]byte("Device Minor: \t 3\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := parseDeviceMinor(b)
		if !ok {
			return
		}
		if n < 0 || n >= 254 || !strings.Contains(string(b), strconv.Itoa(n)) {
			t.Fatalf("parseDeviceMinor(%q) = %d", b, n)
		}
	})
}

func TestParseNVIDIAInfo(t *testing.T) {
	for _, tt := range []struct {
		in    string
		minor int
		uuid  string
	}{
		{"Model: \t\t NVIDIA H200\nGPU UUID: \t GPU-475a5044-0000-1111-2222-333344445555\nBus Location: \t 0000:00:06.0\nDevice Minor: \t 0\n", 0, "GPU-475a5044-0000-1111-2222-333344445555"},
		{"Device Minor: 3\nDevice Minor: 4\n", 3, ""},
		{"Device Minor: x\nGPU UUID: GPU-a\n", -1, "GPU-a"},
		{"", -1, ""},
	} {
		if got := parseNVIDIAInfo([]byte(tt.in)); got.minor != tt.minor || got.uuid != tt.uuid {
			t.Errorf("parseNVIDIAInfo(%q) = %+v", tt.in, got)
		}
	}
}

// FuzzNVIDIAInfo: a UUID is only ever text of the file, and a minor one
// the file states, below the driver's own 254.
func FuzzNVIDIAInfo(f *testing.F) {
	f.Add([]byte("GPU UUID: \t GPU-475a5044\nDevice Minor: \t 3\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := parseNVIDIAInfo(b)
		if in.minor >= 254 || in.minor < -1 || in.minor >= 0 && !strings.Contains(string(b), strconv.Itoa(in.minor)) {
			t.Fatalf("minor %d from %q", in.minor, b)
		}
		if !strings.Contains(string(b), in.uuid) || strings.ContainsAny(in.uuid, "\n") {
			t.Fatalf("uuid %q from %q", in.uuid, b)
		}
	})
}
