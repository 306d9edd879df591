package dra

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/pkg/protocol"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metadatav1alpha1 "k8s.io/dynamic-resource-allocation/api/metadata/v1alpha1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// claimDevices returns the claim's status.devices from the API server.
func (n *node) claimDevices(c *resourceapi.ResourceClaim) []resourceapi.AllocatedDeviceStatus {
	n.t.Helper()
	got, err := n.client.ResourceV1().ResourceClaims(c.Namespace).Get(context.Background(), c.Name, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return got.Status.Devices
}

// After a prepare the claim's status lists each of its devices of ours,
// Ready, with the device's key and nodes in data; after the unprepare it
// lists none. Another driver's entry is left alone throughout.
func TestClaimDeviceStatus(t *testing.T) {
	n := ttyNode(t)
	opt := n.options()
	opt.ClaimStatus = true
	n.start(opt)
	c := n.claim("status", uid(7), ttyDriver, "tty15", "tty13")
	other := resourceapi.AllocatedDeviceStatus{Driver: "other.example.com", Pool: nodeName, Device: "x"}
	c.Status.Devices = []resourceapi.AllocatedDeviceStatus{other}
	c, err := n.client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(context.Background(), c, metav1.UpdateOptions{FieldManager: "other.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	n.checkPrepared(c, n.prepare(ttyDriver, c), "tty15", "tty13")
	n.eventually("the claim's device status", func() error {
		var ours []string
		for _, d := range n.claimDevices(c) {
			if d.Driver != ttyDriver {
				continue
			}
			if d.Pool != nodeName || len(d.Conditions) != 1 || d.Conditions[0].Type != ConditionReady || d.Conditions[0].Status != metav1.ConditionTrue {
				return fmt.Errorf("device %s: %+v", d.Device, d)
			}
			var data DeviceData
			if d.Data == nil || json.Unmarshal(d.Data.Raw, &data) != nil {
				return fmt.Errorf("device %s: data %v", d.Device, d.Data)
			}
			if data.Key != d.Device || !slices.Equal(data.Nodes, []string{"/dev/" + d.Device}) || data.PCIAddress != "" {
				return fmt.Errorf("device %s: data %+v", d.Device, data)
			}
			ours = append(ours, d.Device)
		}
		if slices.Sort(ours); !slices.Equal(ours, []string{"tty13", "tty15"}) {
			return fmt.Errorf("devices of ours in the status: %v", ours)
		}
		return nil
	})
	if r := n.unprepare(ttyDriver, c); r.Error != "" {
		t.Fatal(r.Error)
	}
	n.eventually("the status cleared", func() error {
		if got := n.claimDevices(c); len(got) != 1 || got[0].Driver != other.Driver {
			return fmt.Errorf("status.devices %+v, want only the other driver's", got)
		}
		return nil
	})
}

// A PCI function with a network interface gets networkData: the
// interface's name and MAC address, from sysfs.
func TestNetInterface(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "sys/bus/pci/devices/0000:3b:02.1/net/ens1f0v1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "address"), []byte("3a:1f:00:00:00:02\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	iface, mac, ok := netInterface(root, "0000:3b:02.1")
	if !ok || iface != "ens1f0v1" || mac != "3a:1f:00:00:00:02" {
		t.Fatalf("netInterface = %q, %q, %v", iface, mac, ok)
	}
	if _, _, ok := netInterface(root, "0000:3b:02.2"); ok {
		t.Fatal("a function without net/ has an interface")
	}
	r := result{key: "0000:3b:02.1", DeviceRequestAllocationResult: resourceapi.DeviceRequestAllocationResult{Pool: nodeName, Device: "pci-0000-3b-02-1"}}
	st := deviceStatus("vf.cdi-exec.io", r, protocolDevice("0000:3b:02.1", 1), true, root, metav1.Now().Time)
	if st.NetworkData == nil || *st.NetworkData.InterfaceName != "ens1f0v1" || *st.NetworkData.HardwareAddress != "3a:1f:00:00:00:02" {
		t.Fatalf("networkData %+v", st.NetworkData)
	}
	var data DeviceData
	if err := json.Unmarshal(st.Data.Raw, &data); err != nil || data.PCIAddress != "0000:3b:02.1" || data.NUMANode == nil || *data.NUMANode != 1 {
		t.Fatalf("data %s (%v)", st.Data.Raw, err)
	}
}

func protocolDevice(key string, numa int) protocol.DeviceInfo {
	return protocol.DeviceInfo{Key: key, NUMA: numa, Usable: true}
}

// With device metadata on, the helper writes each request's metadata,
// with the attributes the slice publishes, and a CDI spec that mounts it
// into the container; the prepare's answer names that spec's device, and
// the unprepare removes both.
func TestDeviceMetadata(t *testing.T) {
	n := ttyNode(t) // has the GPUs too
	opt := n.options()
	opt.DeviceMetadata = true
	n.start(opt)
	n.waitSlice(gpuDriver, []string{"pci-0000-10-00-0", "pci-0000-11-00-0"})
	c := n.claim("meta", uid(8), gpuDriver, "pci-0000-11-00-0")
	got := n.prepare(gpuDriver, c)
	if got.Error != "" || len(got.Devices) != 1 {
		t.Fatalf("prepare: %+v", got)
	}
	ids := got.Devices[0].CdiDeviceIds
	if len(ids) != 2 || !strings.Contains(ids[1], "metadata") {
		t.Fatalf("CDI ids %v: want the device's and the metadata's", ids)
	}
	var mounts []string
	cache, err := cdi.NewCache(cdi.WithSpecDirs(n.specDir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	spec := &oci.Spec{Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(spec, ids[1]); err != nil {
		t.Fatalf("injecting %s: %v", ids[1], err)
	}
	var host string
	for _, m := range spec.Mounts {
		mounts = append(mounts, m.Destination)
		host = m.Source
	}
	if len(mounts) != 1 || !strings.HasPrefix(mounts[0], "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/meta/r/") {
		t.Fatalf("the metadata spec mounts %v", mounts)
	}
	b, err := os.ReadFile(host)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"resource.kubernetes.io/pciBusID"`, `"0000:11:00.0"`, `"resource.kubernetes.io/numaNode"`, `"pci0000:80"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the metadata file lacks %s:\n%s", want, b)
		}
	}
	// KubeVirt decodes only the stream's v1alpha1 object, and wants
	// exactly one device in the request, with its full PCI bus id.
	dec := json.NewDecoder(bytes.NewReader(b))
	var alpha []metadatav1alpha1.DeviceMetadata
	for {
		var obj metadatav1alpha1.DeviceMetadata
		if err := dec.Decode(&obj); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("the metadata stream: %v\n%s", err, b)
		}
		if obj.APIVersion == metadatav1alpha1.SchemeGroupVersion.String() {
			alpha = append(alpha, obj)
		}
	}
	if len(alpha) != 1 || len(alpha[0].Requests) != 1 || len(alpha[0].Requests[0].Devices) != 1 {
		t.Fatalf("the metadata stream holds %d v1alpha1 objects, want one of one request of one device:\n%s", len(alpha), b)
	}
	bus := alpha[0].Requests[0].Devices[0].Attributes["resource.kubernetes.io/pciBusID"]
	if bus.StringValue == nil || *bus.StringValue != "0000:11:00.0" {
		t.Errorf("the v1alpha1 device's pciBusID is %v, want 0000:11:00.0", bus.StringValue)
	}
	if r := n.unprepare(gpuDriver, c); r.Error != "" {
		t.Fatal(r.Error)
	}
	if _, err := os.Stat(host); !os.IsNotExist(err) {
		t.Errorf("the metadata file stays after unprepare: %v", err)
	}
}
