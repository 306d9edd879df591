package deviceplugin

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	pr "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cdi-exec/plugins/internal/kubelet/podgc"
	"github.com/cdi-exec/plugins/test/kubelettest"
)

const ttyRes = "cdi-exec.io/tty"

// gcNode is a tty node with the mode whose scans the test runs, and two
// allocations made through the kubelet's Allocate.
type gcNode struct {
	*node
	live, gone string // request-ids: a running pod's, and a removed pod's
}

func newGCNode(t *testing.T) *gcNode {
	n := &gcNode{node: ttyNode(t)}
	n.start(n.options())
	c := n.kubelet.Dial(n.register().Endpoint)
	for _, ids := range [][]string{{"tty13", "tty14"}, {"tty15"}} {
		if _, err := allocate(c, ids...); err != nil {
			t.Fatal(err)
		}
	}
	n.live = podgc.RequestID(ttyRes, "tty", []string{"tty13", "tty14"})
	n.gone = podgc.RequestID(ttyRes, "tty", []string{"tty15"})
	// The running pod's two ttys come in two entries, with another
	// resource in between, as the kubelet lists them.
	pod := kubelettest.Pod("default", "runs", "c", ttyRes, "tty14", "tty13")
	pod.Containers[0].Devices = slices.Insert(pod.Containers[0].Devices, 1,
		&pr.ContainerDevices{ResourceName: "example.com/other", DeviceIds: []string{"x"}})
	n.kubelet.SetPods(pod)
	return n
}

// scan runs one garbage-collection scan at now, with the devices listed
// afresh first.
func (n *gcNode) scan(now time.Time) error {
	n.t.Helper()
	ctx := context.Background()
	for _, r := range n.mode.res {
		r.refresh(ctx)
	}
	return n.mode.collect(ctx, now)
}

func (n *gcNode) holders() []string {
	n.t.Helper()
	out := n.plugin("generic-tty", ttyConf, "CDI_COMMAND=DEVICES")
	var ids []string
	for _, d := range out["devices"].([]any) {
		if h, _ := d.(map[string]any)["heldBy"].(string); h != "" && !slices.Contains(ids, h) {
			ids = append(ids, h)
		}
	}
	slices.Sort(ids)
	return ids
}

func sorted(ids ...string) []string {
	slices.Sort(ids)
	return ids
}

// A removed pod's allocation is freed only once it has been absent from
// two scans in a row and for the grace period; a live pod's is kept
// however its ids are split; ids the mode did not make are never
// touched.
func TestCollect(t *testing.T) {
	n := newGCNode(t)
	n.plugin("generic-tty", ttyConf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=cdictl-pod")
	n.plugin("generic-tty", ttyConf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=k8s-dra-3f0c7a")
	all := sorted(n.live, n.gone, "cdictl-pod", "k8s-dra-3f0c7a")
	grace := n.options().Grace
	t0 := time.Now()
	steps := []struct {
		at   time.Duration
		want []string
	}{
		{0, all},                   // first absence
		{time.Second, all},         // second scan, within the grace
		{grace - time.Second, all}, // still within the grace
		{grace, sorted(n.live, "cdictl-pod", "k8s-dra-3f0c7a")},
		{100 * grace, sorted(n.live, "cdictl-pod", "k8s-dra-3f0c7a")},
	}
	for i, s := range steps {
		if err := n.scan(t0.Add(s.at)); err != nil {
			t.Fatal(err)
		}
		if got := n.holders(); !slices.Equal(got, s.want) {
			t.Fatalf("step %d (+%v): held by %v, want %v", i, s.at, got, s.want)
		}
	}
	if got := n.specFiles(n.gone); len(got) != 0 {
		t.Fatalf("the freed allocation's spec files: %v", got)
	}
	if got := n.specFiles(n.live); len(got) != 1 {
		t.Fatalf("the live allocation's spec files: %v", got)
	}
}

// A scan the kubelet cannot answer counts for nothing.
func TestCollectSkipsFailedScans(t *testing.T) {
	n := newGCNode(t)
	grace := n.options().Grace
	t0 := time.Now()
	if err := n.scan(t0); err != nil {
		t.Fatal(err)
	}
	n.kubelet.FailList(errors.New("kubelet restarting"))
	for i := range 5 {
		if err := n.scan(t0.Add(grace * time.Duration(i+1))); err == nil {
			t.Fatal("a failed List was not reported")
		}
	}
	n.kubelet.SetPods() // every pod gone
	if err := n.scan(t0.Add(10 * grace)); err != nil {
		t.Fatal(err)
	}
	// The gone pod's id is now absent from two successful scans, far
	// apart; the live pod's from one only, and then from a second within
	// the grace.
	if got, want := n.holders(), []string{n.live}; !slices.Equal(got, want) {
		t.Fatalf("held by %v, want %v", got, want)
	}
	if err := n.scan(t0.Add(10*grace + time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, want := n.holders(), []string{n.live}; !slices.Equal(got, want) {
		t.Fatalf("held by %v within the grace, want %v", got, want)
	}
	if err := n.scan(t0.Add(11 * grace)); err != nil {
		t.Fatal(err)
	}
	if got := n.holders(); len(got) != 0 {
		t.Fatalf("held by %v after two scans and the grace without the pods", got)
	}
}

// The scans run on their own every --gc-interval, and free only after two
// of them.
func TestCollectLoop(t *testing.T) {
	n := ttyNode(t)
	opt := n.options()
	opt.GCInterval, opt.Grace, opt.Poll = 20*time.Millisecond, 50*time.Millisecond, 20*time.Millisecond
	var logs kubelettest.Buffer
	opt.Log = slog.New(slog.NewTextHandler(&logs, nil))
	n.start(opt)
	c := n.kubelet.Dial(n.register().Endpoint)
	if _, err := allocate(c, "tty19"); err != nil {
		t.Fatal(err)
	}
	// The log line follows the free: wait for it, then check the store.
	freed := regexp.MustCompile(`msg="gc: freed" .* scans=(\d+)`)
	var m []string
	for deadline := time.Now().Add(time.Minute); m == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not freed within a minute:\n%s", logs.String())
		}
		m = freed.FindStringSubmatch(logs.String())
	}
	if held := n.held(t, "generic-tty", ""); len(held) > 0 {
		t.Fatalf("logged as freed but still held: %v\n%s", held, logs.String())
	}
	scans, _ := strconv.Atoi(m[1])
	if scans < 2 {
		t.Fatalf("freed without a log line saying after at least two scans:\n%s", logs.String())
	}
}
