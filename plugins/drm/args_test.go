package main

import (
	"encoding/json"
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
		{`{"want_device_nodes":[]}`, false, false},
		{`{"want_device_nodes":["card"]}`, false, false},
		{`{"want_device_types":["primary"]}`, false, false},
		{`{"deviceid_whitelist":["0x12345"]}`, false, false},
		{`{"numa_policy":"loose"}`, false, false},
	}
	for _, tt := range tests {
		f, strict, err := decode(tt.raw)
		if (err == nil) != tt.ok || strict != tt.strict {
			t.Errorf("%s: %+v %v %v", tt.raw, f, strict, err)
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
