// Package kubelettest is a fake kubelet for tests of device plugins: the
// registration service in <root>/device-plugins/kubelet.sock, a
// PodResources (v1) service in <root>/pod-resources/kubelet.sock whose pod
// list the test sets, and a restart that behaves like a real kubelet's: it
// removes every socket in the device-plugins directory and creates its own
// anew. Everything is real gRPC over unix sockets under a short temporary
// root (test/sockdir), whatever TMPDIR is.
//
// It also holds what the device-plugin mode's and the DRA driver's tests share: the
// plugin binaries (Plugins, Main), a fixture host with its configs (Host),
// and a logger into the test's log (Logger).
package kubelettest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	pr "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cdi-exec/plugins/test/sockdir"
)

// Kubelet is the fake.
type Kubelet struct {
	t    *testing.T
	Root string
	// Registrations receives every Register call, in order.
	Registrations chan *api.RegisterRequest

	mu   sync.Mutex
	reg  *grpc.Server
	pr   *grpc.Server
	pods []*pr.PodResources
	errs error // answered by List instead of the pods, when set
	list int   // List calls answered
}

// Start starts a fake kubelet under a new short temporary root and stops
// it when the test ends.
func Start(t *testing.T) *Kubelet {
	t.Helper()
	k := &Kubelet{t: t, Root: sockdir.New(t, "cdi-"), Registrations: make(chan *api.RegisterRequest, 64)}
	for _, d := range []string{"device-plugins", "pod-resources"} {
		if err := os.MkdirAll(filepath.Join(k.Root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	k.reg = k.serve(filepath.Join(k.PluginDir(), "kubelet.sock"), func(s *grpc.Server) {
		api.RegisterRegistrationServer(s, registration{k: k})
	})
	k.pr = k.serve(filepath.Join(k.Root, "pod-resources", "kubelet.sock"), func(s *grpc.Server) {
		pr.RegisterPodResourcesListerServer(s, lister{k: k})
	})
	t.Cleanup(k.Stop)
	return k
}

// PluginDir is the device-plugins directory.
func (k *Kubelet) PluginDir() string { return filepath.Join(k.Root, "device-plugins") }

func (k *Kubelet) serve(path string, register func(*grpc.Server)) *grpc.Server {
	k.t.Helper()
	l, err := net.Listen("unix", sockdir.Path(k.t, path))
	if err != nil {
		k.t.Fatal(err)
	}
	// A listener closed after its path was replaced would remove the new
	// socket; Stop removes the paths itself.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	s := grpc.NewServer()
	register(s)
	go func() { _ = s.Serve(l) }()
	return s
}

// Stop stops both services; their sockets go with them.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.reg != nil {
		k.reg.Stop()
		k.reg = nil
	}
	if k.pr != nil {
		k.pr.Stop()
		k.pr = nil
	}
	for _, p := range []string{filepath.Join(k.PluginDir(), "kubelet.sock"), filepath.Join(k.Root, "pod-resources", "kubelet.sock")} {
		_ = os.Remove(p)
	}
}

// Restart stops the registration service, removes every file in the
// device-plugins directory, the plugins' sockets included, and serves
// registration again on a new kubelet.sock, as a restarted kubelet does.
func (k *Kubelet) Restart() {
	k.t.Helper()
	k.mu.Lock()
	if k.reg != nil {
		k.reg.Stop()
	}
	k.mu.Unlock()
	entries, err := os.ReadDir(k.PluginDir())
	if err != nil {
		k.t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(k.PluginDir(), e.Name())); err != nil {
			k.t.Fatal(err)
		}
	}
	s := k.serve(filepath.Join(k.PluginDir(), "kubelet.sock"), func(s *grpc.Server) {
		api.RegisterRegistrationServer(s, registration{k: k})
	})
	k.mu.Lock()
	k.reg = s
	k.mu.Unlock()
}

// SetPods sets what PodResources List answers from now on.
func (k *Kubelet) SetPods(pods ...*pr.PodResources) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods, k.errs = pods, nil
}

// FailList makes List answer err from now on.
func (k *Kubelet) FailList(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.errs = err
}

// Lists returns how many List calls were answered.
func (k *Kubelet) Lists() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.list
}

// Pod returns a pod whose one container holds the device ids of resource,
// each id in an entry of its own, as the kubelet splits them.
func Pod(namespace, name, container, resource string, ids ...string) *pr.PodResources {
	c := &pr.ContainerResources{Name: container}
	for _, id := range ids {
		c.Devices = append(c.Devices, &pr.ContainerDevices{ResourceName: resource, DeviceIds: []string{id}})
	}
	return &pr.PodResources{Namespace: namespace, Name: name, Containers: []*pr.ContainerResources{c}}
}

// Dial connects to a device plugin's socket in the device-plugins
// directory, as the kubelet does after a registration.
func (k *Kubelet) Dial(socket string) api.DevicePluginClient {
	k.t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.PluginDir(), socket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(func() { conn.Close() })
	return api.NewDevicePluginClient(conn)
}

type registration struct {
	api.UnimplementedRegistrationServer
	k *Kubelet
}

func (r registration) Register(_ context.Context, req *api.RegisterRequest) (*api.Empty, error) {
	r.k.Registrations <- proto.Clone(req).(*api.RegisterRequest)
	return &api.Empty{}, nil
}

type lister struct {
	pr.UnimplementedPodResourcesListerServer
	k *Kubelet
}

func (l lister) List(context.Context, *pr.ListPodResourcesRequest) (*pr.ListPodResourcesResponse, error) {
	l.k.mu.Lock()
	defer l.k.mu.Unlock()
	if l.k.errs != nil {
		return nil, l.k.errs
	}
	l.k.list++
	resp := &pr.ListPodResourcesResponse{}
	for _, p := range l.k.pods {
		resp.PodResources = append(resp.PodResources, proto.Clone(p).(*pr.PodResources))
	}
	return resp, nil
}
