package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/test/fixture"
	"github.com/cdi-exec/plugins/test/kubelettest"
	"github.com/cdi-exec/plugins/test/sockdir"
)

// binDir holds the plugin binaries: $CDI_TEST_BIN_DIR (make test sets
// it), or a fresh build.
var binDir string

func TestMain(m *testing.M) {
	kubelettest.Main(m, "dra", "../../../plugins/...", &binDir)
}

// nodeName is the fake cluster's one node.
const nodeName = "node-1"

// node is a fixture host, its plugin configs and state, a kubelet root
// directory, a fake API server (client-go's fake clientset) and a DRA
// plugin serving them.
type node struct {
	t        *testing.T
	root     string // CDI_HOST_ROOT
	state    string // CDI_STATE_DIR
	conf     string // conf dir
	specDir  string
	kubelet  string // the kubelet's root directory
	claimDir string // the drivers' state
	client   *fake.Clientset
	inst     *instance // the last one started
}

// instance is one running Plugin, as one pod of the driver's DaemonSet.
type instance struct {
	n      *node
	plugin *Plugin
	podUID string
	done   chan error
	stop   context.CancelFunc
}

// newNode lays out the host and writes the configs, as "<type>.d/<name>"
// → content.
func newNode(t *testing.T, h fixture.Host, confs map[string]string) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{t: t, root: filepath.Join(dir, "host"), state: filepath.Join(dir, "state"),
		conf: filepath.Join(dir, "conf"), specDir: filepath.Join(dir, "cdi"),
		kubelet: sockdir.New(t, "cdi-"), claimDir: filepath.Join(dir, "dra")}
	kubelettest.Host(t, h, n.root, n.state, n.conf, confs)
	n.client = fakeAPI()
	return n
}

// options are the plugin's options for the node. Polls and stale-claim
// scans happen only when a test asks for them, unless it sets intervals
// itself.
func (n *node) options() Options {
	return Options{
		NodeName: nodeName, Client: n.client, ConfDir: n.conf, Suffix: "cdi-exec.io",
		KubeletDir: n.kubelet, CDISpecDir: n.specDir, ClaimStateDir: n.claimDir, PluginStateDir: n.state,
		Caller: caller.Caller{Path: binDir, Timeout: 20 * time.Second},
		Poll:   time.Hour, StaleInterval: time.Hour, StaleGrace: time.Minute,
		Log: kubelettest.Logger(n.t),
	}
}

// start runs a plugin with opt until the test ends, and waits until every
// driver answers on its registration socket.
func (n *node) start(opt Options) *instance {
	n.t.Helper()
	p, err := New(opt)
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{n: n, plugin: p, podUID: opt.PodUID, done: make(chan error, 1), stop: cancel}
	go func() { in.done <- p.Run(ctx) }()
	n.t.Cleanup(func() { in.shutdown() })
	for _, name := range p.Drivers() {
		n.eventually("driver "+name+" to answer GetInfo", func() error {
			select {
			case err := <-in.done:
				in.done <- err
				return fmt.Errorf("%w: Run returned %v", errGiveUp, err)
			default:
			}
			_, err := n.info(in.regSocket(name))
			return err
		})
	}
	n.inst = in
	return in
}

// shutdown stops the plugin and returns what Run returned.
func (in *instance) shutdown() error {
	in.stop()
	select {
	case err := <-in.done:
		in.done <- err // for a second call
		return err
	case <-time.After(time.Minute):
		in.n.t.Fatal("the plugin did not stop within a minute")
		return nil
	}
}

// regSocket is a driver's registration socket.
func (in *instance) regSocket(driver string) string {
	name := driver + "-reg.sock"
	if in.podUID != "" {
		name = driver + "-" + in.podUID + "-reg.sock"
	}
	return sockdir.Path(in.n.t, in.n.kubelet, "plugins_registry", name)
}

// driver returns the running driver called name.
func (in *instance) driver(name string) *driver {
	for _, d := range in.plugin.drivers {
		if d.name == name {
			return d
		}
	}
	in.n.t.Fatalf("no driver %s", name)
	return nil
}

// conn dials a unix socket.
func (n *node) conn(path string) *grpc.ClientConn {
	n.t.Helper()
	c, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { c.Close() })
	return c
}

// info asks a registration socket who it is, as the kubelet's plugin
// watcher does.
func (n *node) info(sock string) (*registerapi.PluginInfo, error) {
	if _, err := os.Stat(sock); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return registerapi.NewRegistrationClient(n.conn(sock)).GetInfo(ctx, &registerapi.InfoRequest{})
}

// dra dials a driver's DRA service of the instance, as the kubelet does
// after GetInfo.
func (in *instance) dra(driver string) drapb.DRAPluginClient {
	in.n.t.Helper()
	info, err := in.n.info(in.regSocket(driver))
	if err != nil {
		in.n.t.Fatal(err)
	}
	return drapb.NewDRAPluginClient(in.n.conn(info.Endpoint))
}

// claim creates a ResourceClaim allocated the named devices of driver
// from this node's pool, for request "r".
func (n *node) claim(name, uid, driver string, devices ...string) *resourceapi.ResourceClaim {
	n.t.Helper()
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: driver, Pool: nodeName, Device: d})
	}
	c, err := n.client.ResourceV1().ResourceClaims("default").Create(context.Background(), c, metav1.CreateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return c
}

// deleteClaim deletes a claim from the API server.
func (n *node) deleteClaim(c *resourceapi.ResourceClaim) {
	n.t.Helper()
	if err := n.client.ResourceV1().ResourceClaims(c.Namespace).Delete(context.Background(), c.Name, metav1.DeleteOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// prepare calls NodePrepareResources of the last instance for one claim
// and returns its answer.
func (n *node) prepare(driver string, c *resourceapi.ResourceClaim) *drapb.NodePrepareResourceResponse {
	n.t.Helper()
	return n.inst.prepare(driver, c)
}

// prepare calls NodePrepareResources for one claim and returns its answer.
func (in *instance) prepare(driver string, c *resourceapi.ResourceClaim) *drapb.NodePrepareResourceResponse {
	n := in.n
	n.t.Helper()
	resp, err := in.dra(driver).NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}},
	})
	if err != nil {
		n.t.Fatalf("NodePrepareResources: %v", err)
	}
	return resp.Claims[string(c.UID)]
}

// unprepare calls NodeUnprepareResources of the last instance for one
// claim and returns its answer.
func (n *node) unprepare(driver string, c *resourceapi.ResourceClaim) *drapb.NodeUnprepareResourceResponse {
	n.t.Helper()
	return n.inst.unprepare(driver, c)
}

// unprepare calls NodeUnprepareResources for one claim and returns its
// answer.
func (in *instance) unprepare(driver string, c *resourceapi.ResourceClaim) *drapb.NodeUnprepareResourceResponse {
	n := in.n
	n.t.Helper()
	resp, err := in.dra(driver).NodeUnprepareResources(context.Background(), &drapb.NodeUnprepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}},
	})
	if err != nil {
		n.t.Fatalf("NodeUnprepareResources: %v", err)
	}
	return resp.Claims[string(c.UID)]
}

// holders returns who holds each device of a type, by key, from its
// plugins' DEVICES answers ("" for free).
func (n *node) holders(typ string) map[string]string {
	n.t.Helper()
	confs, _ := caller.Load(n.conf)
	out := map[string]string{}
	for _, conf := range caller.OfType(confs, typ) {
		devs, err := inventory.Devices(context.Background(), caller.Caller{Path: binDir, Timeout: 20 * time.Second}, conf)
		if err != nil {
			n.t.Fatal(err)
		}
		for _, d := range devs {
			out[d.Key] = d.HeldBy
		}
	}
	return out
}

// run runs a plugin binary as a caller other than the driver would.
func (n *node) run(plugin, conf string, env ...string) error {
	cmd := exec.Command(filepath.Join(binDir, plugin))
	cmd.Env = append([]string{"CDI_HOST_ROOT=" + n.root, "CDI_STATE_DIR=" + n.state, "CDI_PATH=" + binDir}, env...)
	cmd.Stdin = strings.NewReader(conf)
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s %v: %w: %s", plugin, env, err, out)
	}
	return nil
}

// slices returns the driver's ResourceSlices in the fake API server.
func (n *node) slices(driver string) []resourceapi.ResourceSlice {
	n.t.Helper()
	l, err := n.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	var out []resourceapi.ResourceSlice
	for _, s := range l.Items {
		if s.Spec.Driver == driver {
			out = append(out, s)
		}
	}
	return out
}

// errGiveUp ends an eventually at once.
var errGiveUp = errors.New("giving up")

// eventually waits until cond holds, for at most a minute: what it waits
// for happens in the background (the slice controller's writes), and the
// bound only stops a broken test.
func (n *node) eventually(what string, cond func() error) {
	n.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := cond()
		if err == nil {
			return
		}
		if errors.Is(err, errGiveUp) || time.Now().After(deadline) {
			n.t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
