//go:build e2enode

package k8se2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestClusterRunsPods proves the control plane with the node joined to
// it: a pod created through the API server is scheduled onto the node and
// runs, with a service account token that the API server accepts at the
// kubernetes Service's address (the in-cluster config, no kube-proxy);
// and a DaemonSet, which only the controller-manager acts on, gets its
// pod running on the node.
//
// The DRA driver's checks (the DaemonSet from deploy/, its ResourceSlice,
// a claim for two ttys, a driver restart, unprepare) are
// TestClusterDRATTYs in dra_test.go.
func TestClusterRunsPods(t *testing.T) {
	c := StartCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	t.Run("kubectl", func(t *testing.T) {
		out, err := c.Kubectl(ctx, "get", "nodes", "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out); got != "node/"+NodeName {
			t.Fatalf("kubectl get nodes: %q, want node/%s", got, NodeName)
		}
	})
	t.Run("pod", func(t *testing.T) { checkWhoami(ctx, t, c) })
	t.Run("daemonset", func(t *testing.T) { checkDaemonSet(ctx, t, c) })
}

// checkWhoami runs a pod through the API server that asks the API server
// who it is, with its own token, at the address the in-cluster config
// gives it.
func checkWhoami(ctx context.Context, t *testing.T, c *Cluster) {
	script := `sa=/var/run/secrets/kubernetes.io/serviceaccount
wget -q -O- --no-check-certificate --header "Authorization: Bearer $(cat $sa/token)" \
  --header "Content-Type: application/json" \
  --post-data '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}' \
  "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/apis/authentication.k8s.io/v1/selfsubjectreviews" \
  >/dev/termination-log`
	p := PodSpec{Name: "whoami", Script: script}
	if err := c.Create(ctx, "/api/v1/namespaces/default/pods", p.Manifest()); err != nil {
		t.Fatal(err)
	}
	pod, err := c.WaitPod(ctx, "default", "whoami", Succeeded)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != NodeName {
		t.Fatalf("scheduled to %q, want %s", pod.Spec.NodeName, NodeName)
	}
	msg := pod.Status.ContainerStatuses[0].State.Terminated.Message
	var review struct {
		Status struct {
			UserInfo struct{ Username string } `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(msg), &review); err != nil {
		t.Fatalf("the pod's answer from the API server: %v: %q", err, msg)
	}
	if got, want := review.Status.UserInfo.Username, "system:serviceaccount:default:default"; got != want {
		t.Fatalf("the API server knows the pod as %q, want %q", got, want)
	}
	if err := c.Delete(ctx, "/api/v1/namespaces/default/pods/whoami"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitPod(ctx, "default", "whoami", Gone); err != nil {
		t.Fatal(err)
	}
	t.Logf("scheduled to %s; the API server, asked from inside the pod, says it is %s", pod.Spec.NodeName, review.Status.UserInfo.Username)
}

// checkDaemonSet creates a DaemonSet, which only the controller-manager
// acts on, and waits for its pod to run on the node.
func checkDaemonSet(ctx context.Context, t *testing.T, c *Cluster) {
	p := PodSpec{Name: "ds", Script: "sleep 100000", Always: true}
	var tmpl map[string]any
	if err := json.Unmarshal(p.Manifest(), &tmpl); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "cdi-e2e-ds"}
	delete(tmpl, "apiVersion")
	delete(tmpl, "kind")
	tmpl["metadata"] = map[string]any{"labels": labels}
	ds, _ := json.Marshal(map[string]any{
		"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": "ds", "namespace": "default"},
		"spec":     map[string]any{"selector": map[string]any{"matchLabels": labels}, "template": tmpl},
	})
	if err := c.Create(ctx, "/apis/apps/v1/namespaces/default/daemonsets", ds); err != nil {
		t.Fatal(err)
	}
	err := waitFor(ctx, "the DaemonSet's pod to run", func(ctx context.Context) error {
		var l podList
		if err := c.Get(ctx, "/api/v1/namespaces/default/pods?labelSelector=app%3Dcdi-e2e-ds", &l); err != nil {
			return err
		}
		if len(l.Items) != 1 {
			return fmt.Errorf("%d pods", len(l.Items))
		}
		p := l.Items[0]
		if !strings.HasPrefix(p.Metadata.Name, "ds-") || p.Spec.NodeName != NodeName {
			return fmt.Errorf("pod %s on %q", p.Metadata.Name, p.Spec.NodeName)
		}
		return Running(p, true)
	}, c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
}
