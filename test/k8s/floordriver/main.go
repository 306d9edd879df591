// Command floordriver is the floor of make bench-k8s: a minimal DRA
// kubelet plugin on the kubeletplugin helper, with mock devices, whose
// prepare writes one CDI spec per claim (a device that only sets an
// environment variable, so no device node is needed) and returns. The
// bench runs it as a host process beside cdi-kubelet-plugin and compares
// their prepares and pod starts.
//
// It publishes -devices mock devices (mock-0, mock-1, ...) in one
// ResourceSlice of -node, and on SIGTERM or SIGINT stops the helper and
// removes its sockets, its plugin directory and every spec it wrote.
//
// With -publish-nodes it is make bench-scale's floor instead: it only
// publishes, for each node listed, one ResourceSlice of -devices mock
// devices owned by that Node, through a ResourceSlice controller of its
// own (as the helper publishes a node's), and serves no claims.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

func main() {
	node := flag.String("node", "", "the node's name (required)")
	kubeconfig := flag.String("kubeconfig", "", "a kubeconfig to reach the API server (required)")
	kubeletDir := flag.String("kubelet-dir", "/var/lib/kubelet", "the kubelet's root directory")
	cdiDir := flag.String("cdi-spec-dir", "/var/run/cdi", "where prepare writes the claims' CDI specs")
	name := flag.String("driver", "floor.cdi-exec.io", "the DRA driver's name")
	devices := flag.Int("devices", 8, "how many mock devices to publish")
	publish := flag.String("publish-nodes", "", "publish only: a slice for each of these `NODES` (comma-separated), no kubelet plugin")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if (*node == "" && *publish == "") || *kubeconfig == "" || *devices < 1 {
		fmt.Fprintln(os.Stderr, "floordriver: -node or -publish-nodes, -kubeconfig and a positive -devices are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	d := &driver{name: *name, cdiDir: *cdiDir, log: log}
	var err error
	if *publish != "" {
		err = d.publishOnly(ctx, strings.Split(*publish, ","), *kubeconfig, *devices)
	} else {
		err = d.run(ctx, *node, *kubeconfig, *kubeletDir, *devices)
	}
	if err != nil {
		log.Error("floordriver", "err", err)
		os.Exit(1)
	}
}

// driver is the floor: it keeps no state beyond the spec files.
type driver struct {
	name   string
	cdiDir string
	log    *slog.Logger
}

// run serves until ctx ends, then removes what it made.
func (d *driver) run(ctx context.Context, node, kubeconfig, kubeletDir string, devices int) error {
	client, err := newClient(kubeconfig, 1)
	if err != nil {
		return err
	}
	regDir := filepath.Join(kubeletDir, "plugins_registry")
	dataDir := filepath.Join(kubeletDir, "plugins", d.name)
	for _, dir := range []string{regDir, dataDir, d.cdiDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	defer d.cleanup(regDir, dataDir)
	h, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(d.name),
		kubeletplugin.NodeName(node),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(regDir),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.HealthService(false))
	if err != nil {
		return fmt.Errorf("starting the helper: %w", err)
	}
	defer h.Stop()
	pools := map[string]resourceslice.Pool{node: {Slices: []resourceslice.Slice{{Devices: mockDevices(devices)}}}}
	if err := h.PublishResources(ctx, resourceslice.DriverResources{Pools: pools}); err != nil {
		return fmt.Errorf("publishing: %w", err)
	}
	d.log.Info("serving", "driver", d.name, "devices", devices)
	<-ctx.Done()
	return nil
}

// newClient is a client of the kubeconfig's API server, with the limits
// of as many drivers as nodes.
func newClient(kubeconfig string, nodes int) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	// The kubelet's limits, as cdi-kubelet-plugin's defaults: the helper
	// GETs each claim before it calls prepare.
	cfg.QPS, cfg.Burst = 50*float32(nodes), 100*nodes
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return client, nil
}

// mockDevices are n devices without attributes: mock-0, mock-1, ...
func mockDevices(n int) []resourceapi.Device {
	devs := make([]resourceapi.Device, n)
	for i := range devs {
		devs[i] = resourceapi.Device{Name: fmt.Sprintf("mock-%d", i)}
	}
	return devs
}

// publishOnly publishes, until ctx ends, each node's slice of devices
// mock devices, in the node's pool and owned by its Node object, with
// one ResourceSlice controller per node, as the kubelet plugin helper
// publishes a node's; the slices stay when it stops, as the helper's do.
// The controllers start at once: each waits at least a second for its
// informer (resourceslice.StartController polls it every second), as
// the nodes' own drivers would, each on its node.
func (d *driver) publishOnly(ctx context.Context, nodes []string, kubeconfig string, devices int) error {
	client, err := newClient(kubeconfig, len(nodes))
	if err != nil {
		return err
	}
	controllers := make([]*resourceslice.Controller, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, name := range nodes {
		wg.Go(func() {
			node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				errs[i] = fmt.Errorf("node %s: %w", name, err)
				return
			}
			controllers[i], err = resourceslice.StartController(ctx, resourceslice.Options{
				DriverName: d.name,
				KubeClient: client,
				Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID},
				Resources: &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
					name: {Slices: []resourceslice.Slice{{Devices: mockDevices(devices)}}},
				}},
				ErrorHandler: func(_ context.Context, err error, msg string) { d.log.Error(msg, "node", name, "err", err) },
			})
			if err != nil {
				errs[i] = fmt.Errorf("publishing for %s: %w", name, err)
			}
		})
	}
	wg.Wait()
	defer func() {
		for _, c := range controllers {
			if c != nil {
				c.Stop()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	d.log.Info("publishing", "driver", d.name, "nodes", len(nodes), "devices", devices)
	<-ctx.Done()
	return nil
}

// cleanup removes the helper's sockets and directory and every spec
// prepare wrote.
func (d *driver) cleanup(regDir, dataDir string) {
	specs, _ := filepath.Glob(filepath.Join(d.cdiDir, d.specPrefix()+"*"))
	for _, p := range append(specs, filepath.Join(regDir, d.name+"-reg.sock"), dataDir) {
		if err := os.RemoveAll(p); err != nil {
			d.log.Error("cleanup", "err", err)
		}
	}
}

// kind is the CDI kind of the mock devices.
func (d *driver) kind() string { return d.name + "/mock" }

// specPrefix starts the name of each spec file the driver writes.
func (d *driver) specPrefix() string { return strings.ReplaceAll(d.kind(), "/", "_") + "_" }

func (d *driver) specPath(claim types.UID) string {
	return filepath.Join(d.cdiDir, d.specPrefix()+string(claim)+".json")
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin: one spec
// per claim, with one env-only device per allocated device.
func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		out[c.UID] = d.prepare(c)
	}
	return out, nil
}

func (d *driver) prepare(c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if c.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)}
	}
	spec := cdispec.Spec{Version: "0.6.0", Kind: d.kind()}
	var res kubeletplugin.PrepareResult
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != d.name {
			continue
		}
		name := string(c.UID) + "-" + r.Device
		spec.Devices = append(spec.Devices, cdispec.Device{
			Name:           name,
			ContainerEdits: cdispec.ContainerEdits{Env: []string{"FLOOR_DEVICE=" + r.Device}},
		})
		res.Devices = append(res.Devices, kubeletplugin.Device{
			Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			CDIDeviceIDs: []string{d.kind() + "=" + name},
		})
	}
	if err := writeSpec(d.specPath(c.UID), spec); err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	return res
}

// writeSpec writes the spec under a temporary name and renames it, so
// the runtime never reads half a spec.
func writeSpec(path string, spec cdispec.Spec) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("writing the CDI spec: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing the CDI spec: %w", err)
	}
	return nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: the
// claim's spec goes.
func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		if err := os.Remove(d.specPath(c.UID)); err != nil && !errors.Is(err, os.ErrNotExist) {
			out[c.UID] = fmt.Errorf("removing the CDI spec: %w", err)
			continue
		}
		out[c.UID] = nil
	}
	return out, nil
}

// HandleError implements kubeletplugin.DRAPlugin: the floor logs.
func (d *driver) HandleError(_ context.Context, err error, msg string) {
	d.log.Error(msg, "err", err)
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin; the health
// service is off, so the helper never calls it.
func (d *driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
