package podgc

import (
	"reflect"
	"testing"

	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

func devs(res string, ids ...string) *v1.ContainerDevices {
	return &v1.ContainerDevices{ResourceName: res, DeviceIds: ids}
}

func TestMerge(t *testing.T) {
	resp := &v1.ListPodResourcesResponse{PodResources: []*v1.PodResources{
		{Namespace: "default", Name: "a", Containers: []*v1.ContainerResources{
			// One container's ttys split per device, as the kubelet does,
			// interleaved with another resource.
			{Name: "c", Devices: []*v1.ContainerDevices{
				devs("cdi-exec.io/tty", "tty48"), devs("cdi-exec.io/gpu", "0000:03:00.0"), devs("cdi-exec.io/tty", "tty17"),
			}},
			{Name: "d", Devices: []*v1.ContainerDevices{devs("cdi-exec.io/tty", "tty20", "tty21")}},
			{Name: "no-devices"},
		}},
		{Namespace: "other", Name: "a", Containers: []*v1.ContainerResources{
			{Name: "c", Devices: []*v1.ContainerDevices{devs("cdi-exec.io/tty", "tty30"), devs("cdi-exec.io/tty", "tty30")}},
		}},
	}}
	want := []Container{
		{"default", "a", "c", "cdi-exec.io/tty", []string{"tty17", "tty48"}},
		{"default", "a", "c", "cdi-exec.io/gpu", []string{"0000:03:00.0"}},
		{"default", "a", "d", "cdi-exec.io/tty", []string{"tty20", "tty21"}},
		{"other", "a", "c", "cdi-exec.io/tty", []string{"tty30"}},
	}
	if got := Merge(resp); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if got := Merge(&v1.ListPodResourcesResponse{}); len(got) != 0 {
		t.Errorf("empty answer: %+v", got)
	}
}
