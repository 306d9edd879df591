package podgc

// This file reads the kubelet's PodResources API (v1) and says
// which device ids each container holds of each resource.
//
// The kubelet splits one container's devices of one resource over several
// entries (one per device, or per NUMA node), so List merges them per pod,
// container and resource before anyone compares them.

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Socket is the PodResources socket under the kubelet's root directory.
const Socket = "pod-resources/kubelet.sock"

// Container is what one container holds of one resource.
type Container struct {
	Namespace string
	Pod       string
	Container string
	Resource  string   // fully qualified, for example "cdi-exec.io/tty"
	DeviceIDs []string // sorted, without duplicates
}

// Listing is what the kubelet's PodResources List says.
type Listing struct {
	Containers []Container // device-plugin devices, merged (Merge)
	Pods       int         // pods listed, with devices or without
	// Claims are the ResourceClaims some container of a listed pod uses,
	// as "<namespace>/<name>" (Claims).
	Claims map[string]bool
}

// List asks the kubelet listening on socket for every pod's devices and
// claims.
func List(ctx context.Context, socket string) (Listing, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return Listing{}, fmt.Errorf("podresources %s: %w", socket, err)
	}
	defer conn.Close()
	resp, err := v1.NewPodResourcesListerClient(conn).List(ctx, &v1.ListPodResourcesRequest{})
	if err != nil {
		return Listing{}, fmt.Errorf("podresources %s: %w", socket, err)
	}
	return Listing{Containers: Merge(resp), Pods: len(resp.GetPodResources()), Claims: Claims(resp)}, nil
}

// Merge turns a List answer into one Container per pod, container and
// resource, in the order they first appear.
func Merge(resp *v1.ListPodResourcesResponse) []Container {
	type key struct{ ns, pod, ctr, res string }
	var out []Container
	at := map[key]int{}
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				k := key{p.GetNamespace(), p.GetName(), c.GetName(), d.GetResourceName()}
				i, ok := at[k]
				if !ok {
					i = len(out)
					at[k] = i
					out = append(out, Container{Namespace: k.ns, Pod: k.pod, Container: k.ctr, Resource: k.res})
				}
				out[i].DeviceIDs = append(out[i].DeviceIDs, d.GetDeviceIds()...)
			}
		}
	}
	for i := range out {
		slices.Sort(out[i].DeviceIDs)
		out[i].DeviceIDs = slices.Compact(out[i].DeviceIDs)
	}
	return out
}

// Claims returns the ResourceClaims the containers of a List answer use
// (KubeletPodResourcesDynamicResources, on by default since 1.34), as
// "<namespace>/<name>".
func Claims(resp *v1.ListPodResourcesResponse) map[string]bool {
	out := map[string]bool{}
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDynamicResources() {
				out[d.GetClaimNamespace()+"/"+d.GetClaimName()] = true
			}
		}
	}
	return out
}
