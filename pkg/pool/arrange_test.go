package pool

import (
	"reflect"
	"testing"
)

// arrange: each device's own nodes in order, then each shared node once,
// in Pool.Shared's order whatever order the devices brought them in;
// nothing when no device brings one.
func TestArrange(t *testing.T) {
	p := Pool{Shared: []string{"/dev/kfd", "/dev/nvidiactl", "/dev/nvidia-uvm"}}
	tests := []struct {
		name      string
		nodes     [][]string
		want      []string
		remaining [][]string
	}{
		{"no shared node", [][]string{{"/dev/dri/card0"}, {"/dev/dri/card1"}}, nil, [][]string{{"/dev/dri/card0"}, {"/dev/dri/card1"}}},
		{"one device", [][]string{{"/dev/dri/card1", "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"}},
			[]string{"/dev/dri/card1", "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"}, [][]string{{"/dev/dri/card1", "/dev/nvidia0"}}},
		{"two devices share", [][]string{{"/dev/dri/card1", "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"}, {"/dev/dri/card2", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"}},
			[]string{"/dev/dri/card1", "/dev/nvidia0", "/dev/dri/card2", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"},
			[][]string{{"/dev/dri/card1", "/dev/nvidia0"}, {"/dev/dri/card2", "/dev/nvidia1"}}},
		{"vendors mixed: the shared order, not the devices'", [][]string{{"/dev/dri/card1", "/dev/nvidia0", "/dev/nvidiactl"}, {"/dev/dri/card2", "/dev/kfd"}, {"/dev/dri/card3"}},
			[]string{"/dev/dri/card1", "/dev/nvidia0", "/dev/dri/card2", "/dev/dri/card3", "/dev/kfd", "/dev/nvidiactl"},
			[][]string{{"/dev/dri/card1", "/dev/nvidia0"}, {"/dev/dri/card2"}, {"/dev/dri/card3"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.arrange(tt.nodes)
			if !reflect.DeepEqual(got, tt.want) || !reflect.DeepEqual(tt.nodes, tt.remaining) {
				t.Fatalf("arrange = %q, devices left %q; want %q, %q", got, tt.nodes, tt.want, tt.remaining)
			}
		})
	}
}
