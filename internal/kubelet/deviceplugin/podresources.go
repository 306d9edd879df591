package deviceplugin

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

// podResourcesSocket is the PodResources socket under the kubelet's root directory.
const podResourcesSocket = "pod-resources/kubelet.sock"

// podContainer is what one container holds of one resource.
type podContainer struct {
	Namespace string
	Pod       string
	Container string
	Resource  string   // fully qualified, for example "cdi-exec.io/tty"
	DeviceIDs []string // sorted, without duplicates
}

// listPodResources asks the kubelet listening on socket for every pod's devices.
func listPodResources(ctx context.Context, socket string) ([]podContainer, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("podresources %s: %w", socket, err)
	}
	defer conn.Close()
	resp, err := v1.NewPodResourcesListerClient(conn).List(ctx, &v1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("podresources %s: %w", socket, err)
	}
	return mergePodResources(resp), nil
}

// mergePodResources turns a List answer into one podContainer per pod, container and
// resource, in the order they first appear.
func mergePodResources(resp *v1.ListPodResourcesResponse) []podContainer {
	type key struct{ ns, pod, ctr, res string }
	var out []podContainer
	at := map[key]int{}
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				k := key{p.GetNamespace(), p.GetName(), c.GetName(), d.GetResourceName()}
				i, ok := at[k]
				if !ok {
					i = len(out)
					at[k] = i
					out = append(out, podContainer{Namespace: k.ns, Pod: k.pod, Container: k.ctr, Resource: k.res})
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
