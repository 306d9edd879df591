package deviceplugin

import (
	"context"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/cdi-exec/plugins/internal/kubelet/podgc"
)

func allocate(c api.DevicePluginClient, ids ...string) (*api.ContainerAllocateResponse, error) {
	resp, err := c.Allocate(context.Background(), &api.AllocateRequest{
		ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err != nil {
		return nil, err
	}
	return resp.ContainerResponses[0], nil
}

func nodesOf(r *api.ContainerAllocateResponse) []string {
	var out []string
	for _, d := range r.Devices {
		if d.ContainerPath != d.HostPath || d.Permissions != "rw" {
			return []string{"bad spec " + d.String()}
		}
		out = append(out, d.HostPath)
	}
	return out
}

func cdiNames(r *api.ContainerAllocateResponse) []string {
	var out []string
	for _, d := range r.CdiDevices {
		out = append(out, d.Name)
	}
	return out
}

func TestAllocate(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	c := n.kubelet.Dial(n.register().Endpoint)

	r, err := allocate(c, "tty15", "tty13")
	if err != nil {
		t.Fatal(err)
	}
	id := podgc.RequestID("cdi-exec.io/tty", "tty", []string{"tty13", "tty15"})
	name := "cdi-exec.io/tty=" + id
	if got, want := nodesOf(r), []string{"/dev/tty13", "/dev/tty15"}; !slices.Equal(got, want) {
		t.Fatalf("device specs %v, want %v", got, want)
	}
	if got := cdiNames(r); !slices.Equal(got, []string{name}) {
		t.Fatalf("CDI devices %v, want %s", got, name)
	}

	// The spec file is where the mode put it, and the upstream library
	// loads it and injects exactly the two ttys.
	if got := n.specFiles(id); len(got) != 1 {
		t.Fatalf("spec files of %s: %v", id, got)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(n.specDir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	for path, errs := range cache.GetErrors() {
		t.Fatalf("the CDI library rejects %s: %v", path, errs)
	}
	spec := &oci.Spec{Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(spec, name); err != nil {
		t.Fatal(err)
	}
	var injected []string
	for _, d := range spec.Linux.Devices {
		injected = append(injected, d.Path)
	}
	if !slices.Equal(injected, []string{"/dev/tty13", "/dev/tty15"}) {
		t.Fatalf("injected %v", injected)
	}

	// The kubelet asking again for the same set is a replay.
	again, err := allocate(c, "tty13", "tty15")
	if err != nil || !slices.Equal(nodesOf(again), nodesOf(r)) || !slices.Equal(cdiNames(again), cdiNames(r)) {
		t.Fatalf("replay: %v, %v", again, err)
	}
	// The plugin's store holds exactly that, under the derived id.
	if got := n.held(t, "generic-tty", id); !slices.Equal(got, []string{"tty13", "tty15"}) {
		t.Fatalf("store holds %v under %s", got, id)
	}
}

// A failed pinned ADD reaches the kubelet as a gRPC error carrying the
// plugin's code and message.
func TestAllocateErrors(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	c := n.kubelet.Dial(n.register().Endpoint)
	n.plugin("generic-tty", ttyConf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=cdictl-pod")
	tests := []struct {
		ids  []string
		code codes.Code
		says []string
	}{
		{[]string{"tty14", "tty13"}, codes.ResourceExhausted, []string{"cdi-exec code 103", "Insufficient free resources", "tty13: held by another request", "generic-tty"}},
		{[]string{"tty99"}, codes.ResourceExhausted, []string{"cdi-exec code 103", "tty99: no such device"}},
		{[]string{"tty5"}, codes.ResourceExhausted, []string{"tty5: reserved"}},
		{[]string{"tty/5"}, codes.InvalidArgument, []string{"cdi-exec code 102", "tty/5"}},
	}
	for _, tt := range tests {
		_, err := allocate(c, tt.ids...)
		st, _ := status.FromError(err)
		if st.Code() != tt.code {
			t.Errorf("%v: %v, want code %v", tt.ids, err, tt.code)
			continue
		}
		for _, s := range tt.says {
			if !strings.Contains(st.Message(), s) {
				t.Errorf("%v: %q does not say %q", tt.ids, st.Message(), s)
			}
		}
	}
	if _, err := c.Allocate(context.Background(), &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{{}}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty container request: %v", err)
	}
	if got := n.held(t, "generic-tty", ""); !slices.Equal(got, []string{"tty13"}) {
		t.Fatalf("store holds %v", got)
	}
}
