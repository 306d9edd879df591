package deviceplugin

import (
	"context"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Device is one device offered to the kubelet.
type Device struct {
	ID      string
	NUMA    int      // NUMA node, or -1 when unknown
	PCIe    []string // place in the PCIe tree (alloc.Candidate.PCIe); nil when unknown
	Healthy bool     // the kubelet may hand it out
	// Free means no request-id holds it; GetPreferredAllocation prefers
	// free devices over healthy ones that are still held (by an
	// allocation the garbage collector has not freed yet).
	Free bool
}

// Allocation is what a container gets.
type Allocation struct {
	CDIDevices []string // fully qualified CDI device names
	Nodes      []string // the same devices as host device node paths
}

// Backend supplies the devices of one resource and hands them out.
type Backend interface {
	// Devices returns the devices now, in the plugin's preference order,
	// and a channel that is closed when they change.
	Devices() ([]Device, <-chan struct{})
	// Allocate hands out exactly the devices ids for one container. Its
	// errors reach the kubelet as they are (a gRPC status, when it is one).
	Allocate(ctx context.Context, ids []string) (*Allocation, error)
}

// server implements the kubelet's DevicePlugin service.
type server struct {
	api.UnimplementedDevicePluginServer
	backend Backend
	log     *slog.Logger
}

func options() *api.DevicePluginOptions {
	return &api.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

func (s *server) GetDevicePluginOptions(context.Context, *api.Empty) (*api.DevicePluginOptions, error) {
	return options(), nil
}

// ListAndWatch sends the device list, then the whole list again on every
// change, until the kubelet hangs up or the server stops.
func (s *server) ListAndWatch(_ *api.Empty, stream grpc.ServerStreamingServer[api.ListAndWatchResponse]) error {
	for {
		devs, changed := s.backend.Devices()
		if err := stream.Send(&api.ListAndWatchResponse{Devices: toAPI(devs)}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

func toAPI(devs []Device) []*api.Device {
	out := make([]*api.Device, len(devs))
	for i, d := range devs {
		out[i] = &api.Device{ID: d.ID, Health: api.Unhealthy}
		if d.Healthy {
			out[i].Health = api.Healthy
		}
		if d.NUMA >= 0 {
			out[i].Topology = &api.TopologyInfo{Nodes: []*api.NUMANode{{ID: int64(d.NUMA)}}}
		}
	}
	return out
}

func (s *server) GetPreferredAllocation(_ context.Context, req *api.PreferredAllocationRequest) (*api.PreferredAllocationResponse, error) {
	devs, _ := s.backend.Devices()
	resp := &api.PreferredAllocationResponse{}
	for _, r := range req.GetContainerRequests() {
		ids := Prefer(devs, r.GetAvailableDeviceIDs(), r.GetMustIncludeDeviceIDs(), int(r.GetAllocationSize()))
		resp.ContainerResponses = append(resp.ContainerResponses, &api.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate hands out each container's devices. The kubelet sends one
// container per call; a call with several is served container by
// container, and a failure fails the call (what earlier containers got
// stays allocated until the garbage collector frees it).
func (s *server) Allocate(ctx context.Context, req *api.AllocateRequest) (*api.AllocateResponse, error) {
	resp := &api.AllocateResponse{}
	for _, r := range req.GetContainerRequests() {
		if len(r.GetDevicesIds()) == 0 {
			return nil, status.Error(codes.InvalidArgument, "allocate: a container request without device ids")
		}
		a, err := s.backend.Allocate(ctx, r.GetDevicesIds())
		if err != nil {
			return nil, err
		}
		c := &api.ContainerAllocateResponse{}
		for _, name := range a.CDIDevices {
			c.CdiDevices = append(c.CdiDevices, &api.CDIDevice{Name: name})
		}
		for _, p := range a.Nodes {
			c.Devices = append(c.Devices, &api.DeviceSpec{ContainerPath: p, HostPath: p, Permissions: "rw"})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, c)
	}
	return resp, nil
}

func (s *server) PreStartContainer(context.Context, *api.PreStartContainerRequest) (*api.PreStartContainerResponse, error) {
	return &api.PreStartContainerResponse{}, nil
}
