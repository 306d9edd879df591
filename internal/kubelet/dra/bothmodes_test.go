package dra

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdi-exec/plugins/internal/kubelet/deviceplugin"
	"github.com/cdi-exec/plugins/internal/kubelet/modelock"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/test/kubelettest"
)

// devicePlugin runs the device-plugin mode on the node for tty, with its
// mode lock as cdi-kubelet-plugin takes it, until stop is called or the
// test ends.
type devicePlugin struct {
	stop func()
}

func (n *node) startDevicePlugin(kl *kubelettest.Kubelet, gcInterval time.Duration) *devicePlugin {
	n.t.Helper()
	lock, err := modelock.Acquire(n.t.Context(), n.state, modelock.DevicePlugin, []string{"tty"})
	if err != nil {
		n.t.Fatal(err)
	}
	b, err := deviceplugin.New(deviceplugin.Options{
		ConfDir: n.conf, Types: []string{"tty"}, Prefix: "cdi-exec.io", KubeletDir: kl.Root, CDISpecDir: n.specDir,
		Caller: caller.Caller{Path: binDir, Timeout: 20 * time.Second},
		Poll:   time.Hour, GCInterval: gcInterval, Grace: 0, Watch: 10 * time.Millisecond,
		Log: n.options().Log,
	})
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	select {
	case <-kl.Registrations:
	case <-time.After(time.Minute):
		n.t.Fatal("the device-plugin mode did not register within a minute")
	}
	dp := &devicePlugin{}
	dp.stop = func() {
		cancel()
		if err := <-done; err != nil {
			n.t.Errorf("device-plugin mode: %v", err)
		}
		lock.Release()
		dp.stop = func() {}
	}
	n.t.Cleanup(func() { dp.stop() })
	return dp
}

// TestBothModesOnOneNode switches a node's ttys from the device-plugin
// mode to the DRA mode and back, over the same plugins' stores. Neither
// mode frees what the other made: the DRA mode's stale-claim scans free
// only the claims it recorded, and the device-plugin mode's GC only its
// own k8s-dp- ids.
func TestBothModesOnOneNode(t *testing.T) {
	n := ttyNode(t)
	kl := kubelettest.Start(t)

	// The device-plugin mode: the kubelet gives tty15 to a pod.
	dp := n.startDevicePlugin(kl, time.Hour)
	_, err := kl.Dial(deviceplugin.Socket("cdi-exec.io/tty")).Allocate(t.Context(), &api.AllocateRequest{
		ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{"tty15"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dpID := n.holders("tty")["tty15"]
	if !strings.HasPrefix(dpID, "k8s-dp-tty-") {
		t.Fatalf("tty15 is held by %q, want a device-plugin id", dpID)
	}
	kl.SetPods(kubelettest.Pod("default", "dp-pod", "c", "cdi-exec.io/tty", "tty15"))
	dp.stop()

	// The DRA mode: tty15 is not offered; a deleted claim is freed, and
	// nothing else.
	opt := n.options()
	opt.Types = []string{"tty"}
	in := n.start(opt)
	n.waitSlice(ttyDriver, ttys(13, 19, "tty15"))
	gone := n.claim("gone", uid(1), ttyDriver, "tty14")
	stays := n.claim("stays", uid(2), ttyDriver, "tty16")
	for _, c := range []*resourceapi.ResourceClaim{gone, stays} {
		if r := n.prepare(ttyDriver, c); r.Error != "" {
			t.Fatalf("prepare %s: %s", c.Name, r.Error)
		}
	}
	n.deleteClaim(gone)
	d := in.driver(ttyDriver)
	first := time.Now()
	d.lifecycle.collect(t.Context(), first)
	d.lifecycle.collect(t.Context(), first.Add(opt.StaleGrace))
	want := map[string]string{"tty14": "", "tty15": dpID, "tty16": uid(2)}
	n.checkHolders("after the DRA mode's stale-claim scans", want)
	if err := in.shutdown(); err != nil {
		t.Fatal(err)
	}

	// The device-plugin mode again, and its pod is gone: its GC frees
	// its own id, and leaves the DRA claim alone.
	kl.SetPods()
	n.startDevicePlugin(kl, 10*time.Millisecond)
	n.eventually("the device-plugin GC to free tty15", func() error {
		if h := n.holders("tty")["tty15"]; h != "" {
			return fmt.Errorf("held by %q", h)
		}
		return nil
	})
	scans := kl.Lists()
	n.eventually("three more GC scans", func() error {
		if kl.Lists() < scans+3 {
			return fmt.Errorf("%d scans", kl.Lists()-scans)
		}
		return nil
	})
	want["tty15"] = ""
	n.checkHolders("after the device-plugin mode's GC scans", want)
}

// checkHolders checks who holds the ttys named in want.
func (n *node) checkHolders(when string, want map[string]string) {
	n.t.Helper()
	got := n.holders("tty")
	for k, h := range want {
		if got[k] != h {
			n.t.Fatalf("%s: %s is held by %q, want %q", when, k, got[k], h)
		}
	}
}
