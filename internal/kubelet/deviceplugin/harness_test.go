package deviceplugin

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/test/fixture"
	"github.com/cdi-exec/plugins/test/kubelettest"
)

// binDir holds the plugin binaries: $CDI_TEST_BIN_DIR (make test sets it),
// or a fresh build.
var binDir string

func TestMain(m *testing.M) {
	kubelettest.Main(m, "deviceplugin", "../../../plugins/...", &binDir)
}

// node is a fixture host, its plugin configs and state, a fake kubelet and
// the mode serving them.
type node struct {
	t       *testing.T
	root    string // CDI_HOST_ROOT
	state   string // CDI_STATE_DIR
	conf    string // conf dir
	specDir string
	kubelet *kubelettest.Kubelet
	mode    *Plugin
	done    chan error
	stop    context.CancelFunc
}

// newNode lays out the host and writes the configs, as "<type>.d/<name>"
// → content.
func newNode(t *testing.T, h fixture.Host, confs map[string]string) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{t: t, root: filepath.Join(dir, "host"), state: filepath.Join(dir, "state"),
		conf: filepath.Join(dir, "conf"), specDir: filepath.Join(dir, "cdi")}
	kubelettest.Host(t, h, n.root, n.state, n.conf, confs)
	n.kubelet = kubelettest.Start(t)
	return n
}

// options are the mode's options for the node. Scans and polls happen
// only when a test asks for them, unless it sets intervals itself.
func (n *node) options() Options {
	return Options{
		ConfDir: n.conf, Prefix: "cdi-exec.io", KubeletDir: n.kubelet.Root, CDISpecDir: n.specDir,
		Caller: caller.Caller{Path: binDir, Timeout: 20 * time.Second},
		Poll:   time.Hour, GCInterval: time.Hour, Grace: time.Minute, Watch: 10 * time.Millisecond,
		Log: kubelettest.Logger(n.t),
	}
}

// start runs the mode with opt until the test ends.
func (n *node) start(opt Options) {
	n.t.Helper()
	b, err := New(opt)
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.mode, n.done, n.stop = b, make(chan error, 1), cancel
	go func() { n.done <- b.Run(ctx) }()
	n.t.Cleanup(func() { n.shutdown() })
}

// shutdown stops the mode and returns what Run returned.
func (n *node) shutdown() error {
	n.stop()
	select {
	case err := <-n.done:
		n.done <- err // for a second call
		return err
	case <-time.After(time.Minute):
		n.t.Fatal("the device-plugin mode did not stop within a minute")
		return nil
	}
}

// register waits for the next registration with the fake kubelet.
func (n *node) register() *api.RegisterRequest {
	n.t.Helper()
	select {
	case r := <-n.kubelet.Registrations:
		return r
	case <-time.After(time.Minute):
		n.t.Fatal("no registration within a minute")
		return nil
	}
}

// plugin runs a plugin binary as a caller other than the mode would.
func (n *node) plugin(name, conf string, env ...string) map[string]any {
	n.t.Helper()
	cmd := exec.Command(filepath.Join(binDir, name))
	cmd.Env = append([]string{"CDI_HOST_ROOT=" + n.root, "CDI_STATE_DIR=" + n.state, "CDI_PATH=" + binDir}, env...)
	cmd.Stdin = strings.NewReader(conf)
	out, _ := cmd.Output()
	var m map[string]any
	if len(out) > 0 {
		if err := json.Unmarshal(out, &m); err != nil {
			n.t.Fatalf("%s: %v: %s", name, err, out)
		}
	}
	return m
}

// held returns the device keys id holds in a plugin's store, or every
// held key when id is "", read through the plugin's DEVICES.
func (n *node) held(t *testing.T, plugin, id string) []string {
	t.Helper()
	var conf string
	switch plugin {
	case "generic-tty":
		conf = ttyConf
	case "drm":
		conf = gpuConf
	}
	out := n.plugin(plugin, conf, "CDI_COMMAND=DEVICES")
	var keys []string
	for _, d := range out["devices"].([]any) {
		m := d.(map[string]any)
		if h, _ := m["heldBy"].(string); h != "" && (id == "" || h == id) {
			keys = append(keys, m["key"].(string))
		}
	}
	return keys
}

// specFiles lists the spec files of a request-id in the node's CDI spec
// directory, whatever store owns them (docs/cdi-bridge.md).
func (n *node) specFiles(id string) []string {
	n.t.Helper()
	files, err := filepath.Glob(filepath.Join(n.specDir, "cdi-exec.io-tty_"+id+"_*.json"))
	if err != nil {
		n.t.Fatal(err)
	}
	return files
}
