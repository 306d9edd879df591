//go:build e2enode

package k8se2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metadatav1alpha1 "k8s.io/dynamic-resource-allocation/api/metadata/v1alpha1"

	"github.com/cdi-exec/plugins/test/fixture"
)

// pciBusID is a PCI address with its domain, as KubeVirt hands it to
// libvirt.
var pciBusID = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// TestClusterVFIOVirtualMachine: on the vfio-host fixture (GPUs bound to
// vfio-pci, IOMMU groups 20, 31 and 60 usable, 71 not), the chart's pgpu
// type (drm's VFIO mode, off by default, turned on with its own config)
// publishes the three usable GPUs. Two pods stand in for KubeVirt's
// virt-launcher, each with a container named compute: one with a claim
// by name, one with a claim from a template. Each container sees its
// GPU's group node and /dev/vfio/vfio with the host's numbers, and reads
// its device metadata file at the path KubeVirt reads (KEP-5304:
// resourceclaims/<claim> or resourceclaimtemplates/<pod's claim name>,
// then the request and <driver>-metadata.json), the only file there. The
// test decodes it as KubeVirt does: the first object of the stream whose
// apiVersion is metadata.resource.k8s.io/v1alpha1 holds the request with
// exactly one device, the allocated one, whose
// resource.kubernetes.io/pciBusID is its full PCI address, and no
// mdevUUID.
func TestClusterVFIOVirtualMachine(t *testing.T) {
	ctx, f := newFixtureRun(t, 30*time.Minute, fixture.VFIOHost(), false, map[string]string{"pgpu": ""},
		map[string][]string{"pgpu": {"pci-0000-18-00-0", "pci-0000-2a-00-0", "pci-0000-9a-00-0"}})
	groups := map[string]int{"0000:18:00.0": 20, "0000:2a:00.0": 31, "0000:9a:00.0": 60}

	f.yaml(ctx, t, claimYAML("default", "vm-gpu", `
requests:
- name: gpu
  exactly: {deviceClassName: pgpu.cdi-exec.io}`)+`---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-pgpu, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: pgpu.cdi-exec.io}
`+launcherPod("by-name", "gpu", "resourceClaimName: vm-gpu", "resourceclaims/vm-gpu/gpu")+
		launcherPod("from-template", "passthrough", "resourceClaimTemplateName: one-pgpu", "resourceclaimtemplates/passthrough/gpu"))

	seen := map[string]bool{}
	for _, tt := range []struct{ pod, dir, claimName string }{
		{"by-name", "resourceclaims/vm-gpu/gpu", "vm-gpu"},
		{"from-template", "resourceclaimtemplates/passthrough/gpu", ""},
	} {
		t.Run(tt.pod, func(t *testing.T) {
			if _, err := f.c.WaitPod(ctx, "default", tt.pod, Running); err != nil {
				t.Fatal(err)
			}
			line, err := f.c.WaitLogLine(ctx, tt.pod, "compute", "metadata {")
			if err != nil {
				t.Fatal(err)
			}
			stream := strings.TrimPrefix(line, "metadata ")
			// The loop prints files and nodes before the metadata.
			files, err := f.c.WaitLogLine(ctx, tt.pod, "compute", "files")
			if err != nil {
				t.Fatal(err)
			}
			nodes, err := f.c.WaitLogLine(ctx, tt.pod, "compute", "nodes")
			if err != nil {
				t.Fatal(err)
			}

			claim := tt.claimName
			if claim == "" {
				claim = f.podClaim(ctx, t, tt.pod).Name
			}
			alloc := f.allocated(ctx, t, claim)
			if len(alloc["gpu"]) != 1 || len(alloc) != 1 {
				t.Fatalf("the claim %s got %v, want one GPU for request gpu", claim, alloc)
			}
			device := alloc["gpu"][0]
			if seen[device] {
				t.Fatalf("%s was allocated twice", device)
			}
			seen[device] = true

			// KubeVirt globs <dir>/*-metadata.json and wants exactly one.
			if got := strings.Fields(strings.TrimPrefix(files, "files")); !slices.Equal(got, []string{"pgpu.cdi-exec.io-metadata.json"}) {
				t.Fatalf("the container's %s holds %v, want only pgpu.cdi-exec.io-metadata.json", tt.dir, got)
			}
			dev, versions, err := kubevirtDevice(stream, "gpu")
			if err != nil {
				t.Fatalf("%v:\n%s", err, stream)
			}
			if !slices.Contains(versions, metadatav1alpha1.SchemeGroupVersion.String()) {
				t.Fatalf("the stream's objects are %v, without %s", versions, metadatav1alpha1.SchemeGroupVersion)
			}
			if dev.Driver != "pgpu.cdi-exec.io" || dev.Name != device || dev.Pool != NodeName {
				t.Errorf("the metadata names %s/%s/%s, want pgpu.cdi-exec.io/%s/%s", dev.Driver, dev.Pool, dev.Name, NodeName, device)
			}
			bus := dev.Attributes["resource.kubernetes.io/pciBusID"].StringValue
			if bus == nil || !pciBusID.MatchString(*bus) || "pci-"+strings.NewReplacer(":", "-", ".", "-").Replace(*bus) != device {
				t.Fatalf("the device's resource.kubernetes.io/pciBusID is %v, want the full address of %s", bus, device)
			}
			if _, ok := dev.Attributes["mdevUUID"]; ok {
				t.Errorf("a whole PCI device has an mdevUUID: %v", dev.Attributes)
			}
			// libvirt's managed="no": the group node, owned by the
			// container, and the container node /dev/vfio/vfio.
			got := strings.Fields(strings.TrimPrefix(nodes, "nodes"))
			want := []string{fmt.Sprintf("/dev/vfio/%d=f1:%x", groups[*bus], groups[*bus]), "/dev/vfio/vfio=a:c4"}
			if !slices.Equal(got, want) {
				t.Fatalf("the container sees %v, want %v", got, want)
			}
			t.Logf("%s (claim %s, device %s) reads /var/run/kubernetes.io/dra-device-attributes/%s/pgpu.cdi-exec.io-metadata.json: %s; nodes %v",
				tt.pod, claim, device, tt.dir, stream, got)
		})
	}
	if t.Failed() {
		return
	}
	if _, err := f.c.Kubectl(ctx, "delete", "pod", "by-name", "from-template", "--grace-period=0", "--wait=true", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}
	f.waitFreed(ctx, t, slices.Sorted(maps.Keys(seen)))
}

// launcherPod is a pod shaped as KubeVirt's virt-launcher: a container
// named compute with one claim, claimName in the pod, whose source is
// ref ("resourceClaimName: x" or "resourceClaimTemplateName: y"). It
// prints, every second, the files of its metadata directory dir (below
// /var/run/kubernetes.io/dra-device-attributes/), the /dev/vfio nodes
// with their numbers, and the metadata file on one line.
func launcherPod(name, claimName, ref, dir string) string {
	base := "/var/run/kubernetes.io/dra-device-attributes/" + dir
	script := fmt.Sprintf(`while :; do echo "files $(ls %[1]s | tr '\n' ' ')"; echo "nodes $(stat -c '%%n=%%t:%%T' /dev/vfio/* | tr '\n' ' ')"; echo "metadata $(tr -d '\n' < %[1]s/pgpu.cdi-exec.io-metadata.json)"; sleep 1; done`, base)
	return fmt.Sprintf(`---
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  restartPolicy: Never
  resourceClaims:
  - name: %s
    %s
  containers:
  - name: compute
    image: %s
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", %s]
    resources:
      claims: [{name: %s}]
`, name, claimName, ref, Image, strconv.Quote(script), claimName)
}

// kubevirtDevice reads a metadata stream as KubeVirt's
// GetPCIAddressForClaim does (pkg/dra/utils.go): the first object whose
// apiVersion is metadata.resource.k8s.io/v1alpha1, other versions
// skipped, and in it the request, which must hold exactly one device. It
// returns that device and the apiVersion of every object in the stream.
func kubevirtDevice(stream, request string) (metadatav1alpha1.Device, []string, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(stream)))
	var (
		versions []string
		md       *metadatav1alpha1.DeviceMetadata
	)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err == io.EOF {
			break
		} else if err != nil {
			return metadatav1alpha1.Device{}, nil, fmt.Errorf("the metadata stream: %w", err)
		}
		var peek struct {
			APIVersion string `json:"apiVersion"`
		}
		if err := json.Unmarshal(raw, &peek); err != nil {
			return metadatav1alpha1.Device{}, nil, fmt.Errorf("an object of the metadata stream: %w", err)
		}
		versions = append(versions, peek.APIVersion)
		if md != nil || peek.APIVersion != metadatav1alpha1.SchemeGroupVersion.String() {
			continue
		}
		md = new(metadatav1alpha1.DeviceMetadata)
		if err := json.Unmarshal(raw, md); err != nil {
			return metadatav1alpha1.Device{}, nil, fmt.Errorf("the %s object: %w", peek.APIVersion, err)
		}
	}
	if md == nil {
		return metadatav1alpha1.Device{}, versions, fmt.Errorf("no %s object in the stream (%v)", metadatav1alpha1.SchemeGroupVersion, versions)
	}
	for _, r := range md.Requests {
		if r.Name != request {
			continue
		}
		if len(r.Devices) != 1 {
			return metadatav1alpha1.Device{}, versions, fmt.Errorf("request %q has %d devices, KubeVirt takes exactly one", request, len(r.Devices))
		}
		return r.Devices[0], versions, nil
	}
	return metadatav1alpha1.Device{}, versions, fmt.Errorf("no request %q in the %s object", request, metadatav1alpha1.SchemeGroupVersion)
}
