package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	// Its memory, for the chart's limit (docs/performance.md).
	if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)); err == nil {
		for line := range strings.Lines(string(status)) {
			if strings.HasPrefix(line, "VmHWM:") || strings.HasPrefix(line, "VmRSS:") {
				t.Logf("cdi-kubelet-plugin device-plugin after 3 Allocates: %s", strings.TrimSpace(line))
			}
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
	recs := n.records("generic-tty")
	if len(recs) != 2 {
		t.Fatalf("records after exit: %v", recs)
	}
	// Each record says the Kubernetes mode made it, so that cdictl gc
	// leaves it alone.
	for id, r := range recs {
		if r.Owner != "kubernetes" {
			t.Errorf("record %s has owner %q, want kubernetes", id, r.Owner)
		}
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

// cdictl gc never frees what a Kubernetes mode holds (records whose owner
// is kubernetes: made here by running the plugin as the modes do, a
// device-plugin id and a DRA claim UID) unless --include-kubernetes; a
// record without an owner (made before owners were kept, or by a caller
// that names none) keeps the old rule, whatever its id. ls shows owners.
func TestCdictlGCKeepsKubernetes(t *testing.T) {
	n := newCtlNode(t, ctlHost(), map[string]string{"tty.d/generic-tty.conf": ctlConfs["tty.d/generic-tty.conf"]})
	conf := ctlConfs["tty.d/generic-tty.conf"]
	const dp, claim, old = "k8s-dp-tty-00785c94acc31ce196d867d8850b6dd2", "0b2c3d4e-0000-4000-8000-000000000001", "k8s-old"
	for id, env := range map[string][]string{
		dp:    {"CDI_REQUEST_DEVICES=tty13", "CDI_REQUEST_OWNER=kubernetes"},
		claim: {"CDI_REQUEST_DEVICES=tty14", "CDI_REQUEST_OWNER=kubernetes"},
		old:   {"CDI_REQUEST_DEVICES=tty15"},
	} {
		if r := n.run("generic-tty", conf, append([]string{"CDI_COMMAND=ADD", "CDI_VERSION=0.0.2", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=" + id}, env...)...); r.status != 0 {
			t.Fatalf("ADD %s: %s%s", id, r.stdout, r.stderr)
		}
	}
	// cdictl's own allocation has no owner, even with one in its
	// environment.
	r := runArgs(t, filepath.Join(binDir, "cdictl"), []string{"add", "--id", "pod-x", "tty:1"}, []string{
		"CDI_HOST_ROOT=" + n.root, "CDI_STATE_DIR=" + n.state, "CDI_CONF_DIR=" + n.conf, "CDI_PATH=" + binDir,
		"CDI_REQUEST_OWNER=kubernetes", "CDI_GC_KEEP_OWNERS=kubernetes",
	})
	if r.status != 0 {
		t.Fatalf("add pod-x: %d %s%s", r.status, r.stdout, r.stderr)
	}

	var ls struct {
		Allocations []struct{ RequestID, Owner string }
	}
	n.ctl("ls").json(t, &ls)
	owners := map[string]string{}
	for _, a := range ls.Allocations {
		owners[a.RequestID] = a.Owner
	}
	if len(owners) != 4 || owners[dp] != "kubernetes" || owners[claim] != "kubernetes" || owners[old] != "" || owners["pod-x"] != "" {
		t.Fatalf("ls owners %v", owners)
	}
	if table := n.ctl("ls", "-o", "table").stdout; !strings.Contains(strings.SplitN(table, "\n", 2)[0], "OWNER") || !strings.Contains(table, "kubernetes") {
		t.Fatalf("ls table without owners:\n%s", table)
	}

	freed := func(args ...string) []string {
		t.Helper()
		r := n.ctl(append([]string{"gc"}, args...)...)
		var gc gcAnswer
		r.json(t, &gc)
		if r.status != 0 {
			t.Fatalf("gc %v: %d %s%s", args, r.status, r.stdout, r.stderr)
		}
		var out []string
		for _, res := range gc.Results {
			out = append(out, res.Freed...)
		}
		slices.Sort(out)
		return out
	}
	if got := freed("--valid", "foo", "--dry-run"); !slices.Equal(got, []string{old, "pod-x"}) {
		t.Fatalf("gc --dry-run would free %v", got)
	}
	if got := freed("--valid", "foo"); !slices.Equal(got, []string{old, "pod-x"}) {
		t.Fatalf("gc freed %v", got)
	}
	if got := freed("--none-valid"); len(got) != 0 {
		t.Fatalf("gc --none-valid freed %v of the Kubernetes modes'", got)
	}
	if recs := n.records("generic-tty"); len(recs) != 2 || recs[dp] == nil || recs[claim] == nil {
		t.Fatalf("records after gc: %v", recs)
	}
	// A record without an owner takes the owner of its next ADD (a
	// replay), as after an upgrade; an owner that is no name is 102.
	if r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_VERSION=0.0.2", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=k8s-later", "CDI_REQUEST_DEVICES=tty16"); r.status != 0 {
		t.Fatalf("ADD k8s-later: %s%s", r.stdout, r.stderr)
	}
	if r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_VERSION=0.0.2", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=k8s-later", "CDI_REQUEST_DEVICES=tty16", "CDI_REQUEST_OWNER=kubernetes"); r.status != 0 {
		t.Fatalf("replay of k8s-later: %s%s", r.stdout, r.stderr)
	}
	if r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_VERSION=0.0.2", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=x", "CDI_REQUEST_OWNER=a/b"); !strings.Contains(r.stdout, `"code": 102`) || !strings.Contains(r.stdout, "CDI_REQUEST_OWNER") {
		t.Fatalf("ADD with owner a/b: %s", r.stdout)
	}
	if rec := n.records("generic-tty")["k8s-later"]; rec == nil || rec.Owner != "kubernetes" {
		t.Fatalf("k8s-later after its replay: %+v", rec)
	}
	if got := freed("--none-valid", "--include-kubernetes", "--dry-run"); !slices.Equal(got, []string{claim, dp, "k8s-later"}) {
		t.Fatalf("gc --include-kubernetes --dry-run would free %v", got)
	}
	if got := freed("--none-valid", "--include-kubernetes"); !slices.Equal(got, []string{claim, dp, "k8s-later"}) {
		t.Fatalf("gc --include-kubernetes freed %v", got)
	}
	if recs := n.records("generic-tty"); len(recs) != 0 {
		t.Fatalf("records after gc --include-kubernetes: %v", recs)
	}
}
