package dra

import (
	"fmt"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/internal/kubelet/podgc"
	"github.com/cdi-exec/plugins/test/kubelettest"
)

// pinDevicePlugin holds keys under id as the device-plugin mode does: a
// pinned ADD of the tty plugin.
func (n *node) pinDevicePlugin(id string, keys ...string) {
	n.t.Helper()
	devs := fmt.Sprint(len(keys))
	list := ""
	for i, k := range keys {
		if i > 0 {
			list += ","
		}
		list += k
	}
	if err := n.run("generic-tty", ttyConf, "CDI_COMMAND=ADD", "CDI_VERSION=0.0.2", "CDI_REQUEST=tty:"+devs,
		"CDI_REQUEST_ID="+id, "CDI_REQUEST_DEVICES="+list); err != nil {
		n.t.Fatal(err)
	}
}

// A type that moved from the device-plugin mode to the DRA mode: the ids
// the device-plugin mode made stay held while the kubelet lists their
// pods' devices, and are freed into the slice once it no longer does; a
// kubelet that lists no pod at all frees nothing.
func TestDevicePluginLeftovers(t *testing.T) {
	const res = "cdi-exec.io/tty"
	n := ttyNode(t)
	k := kubelettest.Start(t)
	n.kubelet = k.Root
	gone := podgc.RequestID(res, "tty", []string{"tty14"})
	live := podgc.RequestID(res, "tty", []string{"tty15", "tty16"})
	n.pinDevicePlugin(gone, "tty14")
	n.pinDevicePlugin(live, "tty15", "tty16")
	k.SetPods() // a kubelet that has just started: no pods
	opt := n.options()
	opt.StaleInterval, opt.StaleGrace = 20*time.Millisecond, 100*time.Millisecond
	n.start(opt)
	// Held by the device-plugin mode: out of the slice.
	n.waitSlice(ttyDriver, ttys(13, 19, "tty14", "tty15", "tty16"))
	for lists := k.Lists(); k.Lists() < lists+5; {
		time.Sleep(10 * time.Millisecond)
	}
	if h := n.holders("tty"); h["tty14"] != gone {
		t.Fatalf("freed while the kubelet listed no pods: holders %v", h)
	}

	k.SetPods(kubelettest.Pod("default", "runs", "c", res, "tty16", "tty15"))
	n.waitSlice(ttyDriver, ttys(13, 19, "tty15", "tty16"))
	h := n.holders("tty")
	if h["tty14"] != "" || h["tty15"] != live || h["tty16"] != live {
		t.Fatalf("holders %v: want tty14 freed and tty15, tty16 kept by %s", h, live)
	}

	k.SetPods(kubelettest.Pod("default", "other", "c", "example.com/x", "a"))
	n.waitSlice(ttyDriver, ttys(13, 19))
}
