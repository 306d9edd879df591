package main

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

// plan puts replays first and the one type whose plugins held something
// under the id last, and refuses two such types.
func TestPlan(t *testing.T) {
	conf := func(typ, plugin, args string) caller.Config {
		return caller.Config{Type: typ, Plugin: plugin, Raw: []byte(`{"type":"` + typ + `","plugin":"` + plugin + `","args":` + args + `}`)}
	}
	confs := []caller.Config{
		conf("tty", "generic-tty", `{}`),
		conf("gpu", "drm", `{}`),
		conf("vgpu", "sriov", `{"delegate":{"plugin":"drm","args":{}}}`),
		conf("serial", "generic-tty2", `{}`),
		conf("kvm", "generic", `{}`),
		conf("fuse", "generic", `{}`),
	}
	ttyHeld := holding{Plugin: "generic-tty", Amounts: map[string]int{"tty": 1}}
	gpuHeld := holding{Plugin: "drm", Amounts: map[string]int{"gpu": 1}}
	tests := []struct {
		name    string
		request string
		held    []holding
		order   []string
		replay  []string
		err     string
	}{
		{"fresh id", "tty:1,gpu:1,vgpu:99", nil, []string{"tty", "gpu", "vgpu"}, nil, ""},
		{"replays first, the delegate's plugin held gpu", "vgpu:99,tty:1,gpu:1", []holding{ttyHeld, gpuHeld}, []string{"tty", "gpu", "vgpu"}, []string{"tty", "gpu"}, ""},
		{"a new amount is no replay", "tty:2,serial:1", []holding{ttyHeld}, []string{"serial", "tty"}, nil, ""},
		{"two touched types", "tty:2,gpu:2", []holding{ttyHeld, gpuHeld}, nil, nil, "already holds something in the plugins of more than one new type"},
		{"a replay of a type its plugin's record holds beside its first", "fuse:1,kvm:1", []holding{{Plugin: "generic", Amounts: map[string]int{"kvm": 1, "fuse": 1}}}, []string{"fuse", "kvm"}, []string{"fuse", "kvm"}, ""},
		{"an unreadable store may hold anything", "tty:1,gpu:1", []holding{{Plugin: "generic-tty", Unknown: errors.New("x")}}, []string{"gpu", "tty"}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := request.Parse(tt.request)
			if err != nil {
				t.Fatal(err)
			}
			var types []string
			byType := map[string][]request.Item{}
			for _, it := range req.Items {
				types = append(types, it.Spec.Type)
				byType[it.Spec.Type] = append(byType[it.Spec.Type], it)
			}
			order, replay, err := plan(confs, "pod-a", types, byType, tt.held)
			if tt.err != "" {
				var pe *protocol.Error
				if !errors.As(err, &pe) || pe.Code != protocol.CodeConflict || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want code 104 with %q", err, tt.err)
				}
				return
			}
			var replays []string
			for _, typ := range order {
				if replay[typ] {
					replays = append(replays, typ)
				}
			}
			if err != nil || !slices.Equal(order, tt.order) || !slices.Equal(replays, tt.replay) {
				t.Fatalf("order %v replays %v %v; want %v %v", order, replays, err, tt.order, tt.replay)
			}
		})
	}
}

func TestReaches(t *testing.T) {
	c := caller.Config{Plugin: "sriov", Raw: []byte(`{"args":{"delegate":{"plugin":"a","args":{"delegate":{"plugin":"b"}}}}}`)}
	if got := reachOf(c); !slices.Equal(got, []string{"sriov", "a", "b"}) {
		t.Fatalf("Reaches: %v", got)
	}
}
