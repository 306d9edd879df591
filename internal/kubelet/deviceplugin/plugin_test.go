package deviceplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdi-exec/plugins/test/fixture"
)

const ttyConf = `{"cdiVersion": "0.0.2", "name": "TTYs", "type": "tty", "plugin": "generic-tty",
  "args": {"num_system_reserved": 12}}`

// ttyHost has tty0..tty19; with 12 reserved, tty13..tty19 are offered.
var ttyHost = fixture.Host{TTYs: map[string]int{"tty": 20}}

func ttyNode(t *testing.T) *node {
	return newNode(t, ttyHost, map[string]string{"tty.d/tty.conf": ttyConf})
}

// watch is a ListAndWatch stream.
type watch struct {
	t      *testing.T
	stream grpc.ServerStreamingClient[api.ListAndWatchResponse]
}

func (n *node) watch(c api.DevicePluginClient) *watch {
	n.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n.t.Cleanup(cancel)
	s, err := c.ListAndWatch(ctx, &api.Empty{})
	if err != nil {
		n.t.Fatal(err)
	}
	return &watch{t: n.t, stream: s}
}

// next returns the next device list, as "id:health" and, for devices with
// a NUMA node, "id:health:node".
func (w *watch) next() []string {
	w.t.Helper()
	r, err := w.stream.Recv()
	if err != nil {
		w.t.Fatalf("ListAndWatch: %v", err)
	}
	var out []string
	for _, d := range r.Devices {
		s := d.ID + ":" + d.Health
		if d.Topology != nil {
			for _, n := range d.Topology.Nodes {
				s += ":" + string(rune('0'+n.ID))
			}
		}
		out = append(out, s)
	}
	return out
}

func healthyTTYs(from, to int, except ...string) []string {
	var out []string
	for i := from; i <= to; i++ {
		id := "tty" + itoa(i)
		if slices.Contains(except, id) {
			continue
		}
		out = append(out, id+":"+api.Healthy)
	}
	return out
}

func itoa(i int) string { return fmt.Sprint(i) }

func TestRegistration(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	r := n.register()
	if r.Version != api.Version || r.ResourceName != "cdi-exec.io/tty" || r.Endpoint != "cdi-exec.io-tty.sock" ||
		!r.Options.GetGetPreferredAllocationAvailable() || r.Options.GetPreStartRequired() {
		t.Fatalf("registration %+v", r)
	}
	c := n.kubelet.Dial(r.Endpoint)
	opts, err := c.GetDevicePluginOptions(context.Background(), &api.Empty{})
	if err != nil || !opts.GetPreferredAllocationAvailable {
		t.Fatalf("options %+v, %v", opts, err)
	}
	if got, want := n.watch(c).next(), healthyTTYs(13, 19); !slices.Equal(got, want) {
		t.Fatalf("devices %v, want %v", got, want)
	}
}

// Only the --type given is served; each type is its own resource.
func TestTypes(t *testing.T) {
	n := newNode(t, fixture.Host{TTYs: map[string]int{"tty": 20, "ttyS": 4}}, map[string]string{
		"tty.d/tty.conf":       ttyConf,
		"serial.d/serial.conf": `{"cdiVersion": "0.0.2", "name": "serial", "type": "serial", "plugin": "generic-tty", "args": {"pattern": "ttyS"}}`,
	})
	opt := n.options()
	b, err := New(opt)
	if err != nil || !slices.Equal(b.Resources(), []string{"cdi-exec.io/serial", "cdi-exec.io/tty"}) {
		t.Fatalf("resources %v, %v", b.Resources(), err)
	}
	opt.Types = []string{"serial"}
	n.start(opt)
	r := n.register()
	if r.ResourceName != "cdi-exec.io/serial" {
		t.Fatalf("registered %q", r.ResourceName)
	}
	want := []string{"ttyS0:Healthy", "ttyS1:Healthy", "ttyS2:Healthy", "ttyS3:Healthy"}
	if got := n.watch(n.kubelet.Dial(r.Endpoint)).next(); !slices.Equal(got, want) {
		t.Fatalf("devices %v, want %v", got, want)
	}
	opt.Types = []string{"gpu"}
	if _, err := New(opt); err == nil {
		t.Fatal("a type without a config was accepted")
	}
}

// A device held by another caller becomes unhealthy; a device that goes
// away (hot-unplug) leaves the list; a device freed becomes healthy again.
func TestListAndWatch(t *testing.T) {
	n := ttyNode(t)
	opt := n.options()
	opt.Poll = 20 * time.Millisecond
	n.start(opt)
	w := n.watch(n.kubelet.Dial(n.register().Endpoint))
	if got, want := w.next(), healthyTTYs(13, 19); !slices.Equal(got, want) {
		t.Fatalf("devices %v, want %v", got, want)
	}

	add := n.plugin("generic-tty", ttyConf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=cdictl-pod")
	if d, _ := add["devices"].([]any); len(d) != 1 || d[0] != "/dev/tty13" {
		t.Fatalf("ADD by another caller: %v", add)
	}
	want := append([]string{"tty13:" + api.Unhealthy}, healthyTTYs(14, 19)...)
	if got := w.next(); !slices.Equal(got, want) {
		t.Fatalf("after another caller took tty13: %v, want %v", got, want)
	}

	if err := os.Remove(filepath.Join(n.root, "dev/tty17")); err != nil {
		t.Fatal(err)
	}
	want = append([]string{"tty13:" + api.Unhealthy}, healthyTTYs(14, 19, "tty17")...)
	if got := w.next(); !slices.Equal(got, want) {
		t.Fatalf("after tty17 was unplugged: %v, want %v", got, want)
	}

	n.plugin("generic-tty", ttyConf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=cdictl-pod")
	if got, want := w.next(), healthyTTYs(13, 19, "tty17"); !slices.Equal(got, want) {
		t.Fatalf("after tty13 was freed: %v, want %v", got, want)
	}
}

// twoNUMA has GPUs 0000:10..13:00.0 as cards 0-3, alternating between
// NUMA nodes 0 and 1.
func twoNUMA() fixture.Host {
	var h fixture.Host
	for i := range 4 {
		h.GPUs = append(h.GPUs, fixture.GPU{Addr: fmt.Sprintf("0000:%02x:00.0", 0x10+i), Vendor: "0x1002", Device: "0x1",
			NUMA: fixture.Int(i % 2), Driver: "amdgpu", Card: i, Render: 128 + i, Control: -1})
	}
	return h
}

const gpuConf = `{"cdiVersion": "0.0.2", "name": "GPUs", "type": "gpu", "plugin": "drm"}`

const (
	gpu0 = "0000:10:00.0" // node 0
	gpu1 = "0000:11:00.0" // node 1
	gpu2 = "0000:12:00.0" // node 0
	gpu3 = "0000:13:00.0" // node 1
)

func TestPreferredAllocation(t *testing.T) {
	n := newNode(t, twoNUMA(), map[string]string{"gpu.d/drm.conf": gpuConf})
	n.start(n.options())
	c := n.kubelet.Dial(n.register().Endpoint)
	want := []string{gpu0 + ":Healthy:0", gpu1 + ":Healthy:1", gpu2 + ":Healthy:0", gpu3 + ":Healthy:1"}
	if got := n.watch(c).next(); !slices.Equal(got, want) {
		t.Fatalf("devices %v, want %v", got, want)
	}
	all := []string{gpu0, gpu1, gpu2, gpu3}
	tests := []struct {
		name      string
		available []string
		must      []string
		size      int32
		want      []string
	}{
		{"one node, lowest first", all, nil, 2, []string{gpu0, gpu2}},
		{"must-include pulls its node", all, []string{gpu3}, 2, []string{gpu3, gpu1}},
		{"must-include on both nodes", all, []string{gpu1, gpu2}, 3, []string{gpu1, gpu2, gpu0}},
		{"only one per node left", []string{gpu2, gpu3}, nil, 2, []string{gpu2, gpu3}},
		{"node 1 when node 0 is short", []string{gpu0, gpu1, gpu3}, nil, 2, []string{gpu1, gpu3}},
		{"all", all, nil, 4, []string{gpu0, gpu1, gpu2, gpu3}},
		{"more than available", []string{gpu1}, nil, 2, []string{gpu1}},
		{"must is everything", all, []string{gpu2}, 1, []string{gpu2}},
	}
	for _, tt := range tests {
		resp, err := c.GetPreferredAllocation(context.Background(), &api.PreferredAllocationRequest{
			ContainerRequests: []*api.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: tt.available, MustIncludeDeviceIDs: tt.must, AllocationSize: tt.size}},
		})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := resp.ContainerResponses[0].DeviceIDs; !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A restarted kubelet removes the plugin's socket and makes a new
// kubelet.sock; the mode serves and registers again.
func TestKubeletRestart(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	first := n.register()
	for i := range 3 {
		n.kubelet.Restart()
		again := n.register()
		if again.ResourceName != first.ResourceName || again.Endpoint != first.Endpoint {
			t.Fatalf("restart %d: registered %+v", i, again)
		}
		if got, want := n.watch(n.kubelet.Dial(again.Endpoint)).next(), healthyTTYs(13, 19); !slices.Equal(got, want) {
			t.Fatalf("restart %d: devices %v, want %v", i, got, want)
		}
	}
}

// A device-plugin mode started before the kubelet registers once the kubelet is up;
// on shutdown it removes its socket.
func TestLateKubeletAndShutdown(t *testing.T) {
	n := ttyNode(t)
	n.kubelet.Stop()
	n.start(n.options())
	sock := filepath.Join(n.kubelet.PluginDir(), "cdi-exec.io-tty.sock")
	n.kubelet.Restart()
	if r := n.register(); r.Endpoint != filepath.Base(sock) {
		t.Fatalf("registered %+v", r)
	}
	if err := n.shutdown(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
}

// A second device-plugin mode for the same resource does not take the first's socket.
func TestSecondInstanceRefused(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	n.register()
	b, err := New(n.options())
	if err != nil {
		t.Fatal(err)
	}
	err = b.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "another process serves this socket") {
		t.Fatalf("second instance: %v", err)
	}
	if got, want := n.watch(n.kubelet.Dial("cdi-exec.io-tty.sock")).next(), healthyTTYs(13, 19); !slices.Equal(got, want) {
		t.Fatalf("the first instance's devices %v, want %v", got, want)
	}
}
