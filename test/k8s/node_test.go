//go:build e2enode

package k8se2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestNodeRunsStaticPod proves the node itself: a static busybox pod on
// the host's network runs under the kubelet and containerd, in the node's
// private cgroup, and its output is read back through the kubelet's API.
// Removing its manifest removes it.
func TestNodeRunsStaticPod(t *testing.T) {
	n := StartNode(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	marker := "hello-" + RandomID(12)
	n.AddStaticPod(PodSpec{Name: "smoke", Script: "echo " + marker + "; grep pids /proc/self/cgroup"})
	name := StaticName("smoke")
	if _, err := n.WaitPod(ctx, name, Succeeded); err != nil {
		t.Fatal(err)
	}
	out, err := n.Logs(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the pod printed:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] != marker {
		t.Fatalf("the pod printed %q, want %s and its cgroup", out, marker)
	}
	if want := "/" + n.cg.name + "/pods/kubepods/"; !strings.Contains(lines[1], want) {
		t.Errorf("the container's cgroup is %q, want it under %s", lines[1], want)
	}

	n.RemoveStaticPod("smoke")
	if _, err := n.WaitPod(ctx, name, Gone); err != nil {
		t.Fatal(err)
	}
}
