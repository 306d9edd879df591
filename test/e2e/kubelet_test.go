package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/test/kubelettest"
)

// The cdi-kubelet-plugin binary against a fake kubelet: it registers, hands
// out ttys through Allocate with one log line each, and on SIGTERM exits 0
// and removes its socket.
func TestKubeletPluginBinary(t *testing.T) {
	n := newCtlNode(t, specTTYHost, map[string]string{"tty.d/tty.conf": readConf(t, "tty.conf")})
	k := kubelettest.Start(t)
	specs := filepath.Join(t.TempDir(), "cdi")
	cmd := exec.Command(filepath.Join(binDir, "cdi-kubelet-plugin"), "device-plugin",
		"--conf-dir", n.conf, "--kubelet-dir", k.Root, "--cdi-spec-dir", specs, "--resource-prefix", "example.com")
	cmd.Env = []string{"CDI_PATH=" + binDir, "CDI_STATE_DIR=" + n.state, "CDI_HOST_ROOT=" + n.root}
	var logs kubelettest.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	var reg *api.RegisterRequest
	select {
	case reg = <-k.Registrations:
	case err := <-exited:
		t.Fatalf("exited before registering: %v\n%s", err, logs.String())
	case <-time.After(time.Minute):
		t.Fatalf("no registration within a minute:\n%s", logs.String())
	}
	if reg.ResourceName != "example.com/tty" || reg.Endpoint != "example.com-tty.sock" {
		t.Fatalf("registered %+v", reg)
	}
	c := k.Dial(reg.Endpoint)
	for _, ids := range [][]string{{"tty20", "tty21"}, {"tty20", "tty21"}, {"tty30"}} {
		resp, err := c.Allocate(context.Background(), &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: ids}}})
		if err != nil {
			t.Fatalf("Allocate %v: %v\n%s", ids, err, logs.String())
		}
		if cdi := resp.ContainerResponses[0].CdiDevices; len(cdi) != 1 || !strings.HasPrefix(cdi[0].Name, "example.com/tty=k8s-dp-tty-") {
			t.Fatalf("CDI devices %v", cdi)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("still running a minute after SIGTERM")
	}
	if _, err := os.Stat(filepath.Join(k.PluginDir(), reg.Endpoint)); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
	if got := strings.Count(logs.String(), `] "allocate" `); got != 3 {
		t.Fatalf("%d Allocate log lines, want 3:\n%s", got, logs.String())
	}
	// The allocations outlive the device-plugin mode: only its garbage collector frees
	// them, when the kubelet no longer lists them.
	if recs := n.records("generic-tty"); len(recs) != 2 {
		t.Fatalf("records after exit: %v", recs)
	}
}

// Request-ids starting with k8s- belong to the Kubernetes bridges: cdictl
// add refuses them, so nothing else can mint one; del still frees one by
// hand.
func TestCdictlReservedIDs(t *testing.T) {
	n := newCtlNode(t, ctlHost(), map[string]string{"tty.d/generic-tty.conf": ctlConfs["tty.d/generic-tty.conf"]})
	for _, id := range []string{"k8s-dp-tty-00785c94acc31ce196d867d8850b6dd2", "k8s-x"} {
		r := n.ctl("add", "--id", id, "tty:1")
		if r.status != 2 || !strings.Contains(r.stderr, "reserved for the Kubernetes bridges") {
			t.Fatalf("add --id %s: status %d\n%s%s", id, r.status, r.stdout, r.stderr)
		}
	}
	if _, err := os.Stat(store.Path(n.state, "generic-tty")); !os.IsNotExist(err) {
		t.Fatalf("a refused add reached the plugin: %v", err)
	}
	// A device-plugin allocation, made here by running the plugin as the mode
	// would; cdictl del frees it.
	id := "k8s-dp-tty-00785c94acc31ce196d867d8850b6dd2"
	if r := n.run("generic-tty", ctlConfs["tty.d/generic-tty.conf"], "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID="+id, "CDI_REQUEST_DEVICES=tty13"); r.status != 0 {
		t.Fatalf("ADD: %s", r.stdout)
	}
	if r := n.ctl("del", "--id", id); r.status != 0 || len(n.records("generic-tty")) != 0 {
		t.Fatalf("del --id %s: status %d %s", id, r.status, r.stdout)
	}
	if r := n.ctl("add", "--id", "k8sx", "tty:1"); r.status != 0 {
		t.Fatalf("add --id k8sx: %d %s%s", r.status, r.stdout, r.stderr)
	}
}
