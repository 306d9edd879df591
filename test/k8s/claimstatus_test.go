//go:build e2enode

package k8se2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The driver's service account as deploy/50-admissionpolicy.yaml (the
// chart's defaults) names it, and the claim the test writes.
const (
	policyNamespace = "cdi-exec"
	policyAccount   = "cdi-dra"
	statusClaim     = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/shared"
)

// claimStatusObjects are what TestClusterClaimStatusPolicy needs besides the
// policy: the driver's namespace and service account; RBAC that lets the
// account write the status of any claim, for every driver (from 1.36 the
// API server checks resourceclaims/driver, with the verbs
// arbitrary-node:update for a claim not on the writer's node and
// associated-node:update for one on it; granted here whatever the node),
// so that only the policy can refuse; two nodes and a pod of the account
// on each, whose tokens name their node; and a claim.
const claimStatusObjects = `apiVersion: v1
kind: Namespace
metadata: {name: cdi-exec}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: cdi-dra, namespace: cdi-exec}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cdi-e2e-claim-status}
rules:
- apiGroups: [resource.k8s.io]
  resources: [resourceclaims/status, resourceclaims/driver]
  verbs: [get, update, patch, "arbitrary-node:update", "arbitrary-node:patch", "associated-node:update", "associated-node:patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cdi-e2e-claim-status}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cdi-e2e-claim-status}
subjects:
- {kind: ServiceAccount, name: cdi-dra, namespace: cdi-exec}
---
apiVersion: v1
kind: Node
metadata: {name: node-a}
---
apiVersion: v1
kind: Node
metadata: {name: node-b}
---
apiVersion: v1
kind: Pod
metadata: {name: driver-a, namespace: cdi-exec}
spec:
  nodeName: node-a
  serviceAccountName: cdi-dra
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata: {name: driver-b, namespace: cdi-exec}
spec:
  nodeName: node-b
  serviceAccountName: cdi-dra
  containers: [{name: c, image: busybox}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared, namespace: default}
spec:
  devices:
    requests:
    - name: r
      exactly: {deviceClassName: tty.cdi-exec.io, allocationMode: ExactCount, count: 3}
`

// The claim's allocation, written by the admin as the scheduler would: a
// device of tty.cdi-exec.io in each node's pool, and a second one in
// node-a's.
const claimAllocation = `{"devices": {"results": [
 {"request": "r", "driver": "tty.cdi-exec.io", "pool": "node-a", "device": "a0"},
 {"request": "r", "driver": "tty.cdi-exec.io", "pool": "node-a", "device": "a1"},
 {"request": "r", "driver": "tty.cdi-exec.io", "pool": "node-b", "device": "b0"}]}}`

// entry is a status.devices entry of tty.cdi-exec.io.
func entry(pool, device string) map[string]any {
	return map[string]any{"driver": "tty.cdi-exec.io", "pool": pool, "device": device}
}

// TestClusterClaimStatusPolicy checks the claim status policy
// (deploy/50-admissionpolicy.yaml, <release>-claimstatus) on a real API
// server: a node's driver may add, change and remove only its own drivers'
// status.devices entries in its own pool, and every other entry must stay
// as it was, so that node-b's driver can neither drop nor change nor add
// node-a's entries. That is what 1.35 relies on the policy for (1.36 and
// later also check the node in the API server, which the RBAC here lets
// through, so the policy is what refuses on every release).
func TestClusterClaimStatusPolicy(t *testing.T) {
	c := StartAPIServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	objs := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(objs, []byte(claimStatusObjects), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{repoRoot + "/deploy/50-admissionpolicy.yaml", objs} {
		if out, err := c.Kubectl(ctx, "apply", "-f", f); err != nil {
			t.Fatal(err)
		} else {
			t.Logf("kubectl apply -f %s:\n%s", f, out)
		}
	}
	// The admin allocates the claim, as the scheduler would.
	if err := writeStatus(ctx, c, c.admin, func(st map[string]any) {
		var alloc any
		if err := json.Unmarshal([]byte(claimAllocation), &alloc); err != nil {
			t.Fatal(err)
		}
		st["allocation"] = alloc
	}); err != nil {
		t.Fatal(err)
	}

	unbound := c.token(ctx, t, "")
	nodeA, nodeB := c.token(ctx, t, "driver-a"), c.token(ctx, t, "driver-b")
	// The policy is in force once the API server has loaded it: until
	// then, an unchanged status from a token bound to no node passes.
	err := waitFor(ctx, "the claim status policy", func(ctx context.Context) error {
		err := writeStatus(ctx, c, unbound, func(map[string]any) {})
		if isPolicyDenial(err) {
			return nil
		}
		return fmt.Errorf("a token bound to no node: %v", err)
	}, c.daemons...)
	if err != nil {
		t.Fatal(err)
	}

	setDevices := func(devs ...map[string]any) func(map[string]any) {
		return func(st map[string]any) { st["devices"] = devs }
	}
	changed := entry("node-a", "a0")
	changed["data"] = map[string]any{"written": "by node-b"}
	steps := []struct {
		what   string
		as     *client
		change func(map[string]any)
		denied bool
	}{
		{"node-a adds its entry", nodeA, setDevices(entry("node-a", "a0")), false},
		{"node-b adds its own beside it", nodeB, setDevices(entry("node-a", "a0"), entry("node-b", "b0")), false},
		{"node-b drops node-a's entry", nodeB, setDevices(entry("node-b", "b0")), true},
		{"node-b drops every entry", nodeB, func(st map[string]any) { delete(st, "devices") }, true},
		{"node-b changes node-a's entry", nodeB, setDevices(changed, entry("node-b", "b0")), true},
		{"node-b adds an entry in node-a's pool", nodeB, setDevices(entry("node-a", "a0"), entry("node-a", "a1"), entry("node-b", "b0")), true},
		{"node-a changes its entry, keeping node-b's", nodeA, setDevices(entry("node-a", "a1"), entry("node-b", "b0")), false},
		{"node-a drops its entry, keeping node-b's", nodeA, setDevices(entry("node-b", "b0")), false},
	}
	for _, s := range steps {
		before := c.devices(ctx, t)
		err := writeStatus(ctx, c, s.as, s.change)
		switch {
		case s.denied && !isPolicyDenial(err):
			t.Errorf("%s: %v, want 403 from the admission policy", s.what, err)
		case s.denied:
			t.Logf("%s: %v", s.what, err)
			if after := c.devices(ctx, t); after != before {
				t.Errorf("%s was refused, yet status.devices went from %s to %s", s.what, before, after)
			}
		case err != nil:
			t.Errorf("%s: %v", s.what, err)
		}
	}
	if got, want := c.devices(ctx, t), `[{"driver":"tty.cdi-exec.io","pool":"node-b","device":"b0"}]`; got != want {
		t.Errorf("status.devices at the end: %s, want %s", got, want)
	}
}

// isPolicyDenial reports whether err is a 403 from a
// ValidatingAdmissionPolicy.
func isPolicyDenial(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == http.StatusForbidden && strings.Contains(se.body, "ValidatingAdmissionPolicy")
}

// token returns a client with a token of the driver's service account,
// bound to the pod named pod (which names the pod's node in the token), or
// to nothing for "".
func (c *Cluster) token(ctx context.Context, t *testing.T, pod string) *client {
	t.Helper()
	req := map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{}}
	if pod != "" {
		var p Pod
		if err := c.Get(ctx, "/api/v1/namespaces/"+policyNamespace+"/pods/"+pod, &p); err != nil {
			t.Fatal(err)
		}
		req["spec"] = map[string]any{"boundObjectRef": map[string]any{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": p.Metadata.UID}}
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.admin.do(ctx, http.MethodPost, c.server+"/api/v1/namespaces/"+policyNamespace+"/serviceaccounts/"+policyAccount+"/token", body)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		Status struct{ Token string }
	}
	if err := json.Unmarshal(out, &tr); err != nil || tr.Status.Token == "" {
		t.Fatalf("TokenRequest for %q: %v: %s", pod, err, out)
	}
	cl, err := newClient(c.pki, "", "")
	if err != nil {
		t.Fatal(err)
	}
	cl.token = tr.Status.Token
	return cl
}

// writeStatus reads the claim as the admin, lets change edit its status,
// and updates the status as cl (an update with the read resourceVersion).
func writeStatus(ctx context.Context, c *Cluster, cl *client, change func(status map[string]any)) error {
	var claim map[string]any
	if err := c.Get(ctx, statusClaim, &claim); err != nil {
		return err
	}
	st, _ := claim["status"].(map[string]any)
	if st == nil {
		st = map[string]any{}
	}
	change(st)
	claim["status"] = st
	body, err := json.Marshal(claim)
	if err != nil {
		return err
	}
	_, err = cl.do(ctx, http.MethodPut, c.server+statusClaim+"/status", body)
	return err
}

// devices returns the claim's status.devices as JSON, each entry's
// driver, pool, device and data.
func (c *Cluster) devices(ctx context.Context, t *testing.T) string {
	t.Helper()
	var claim struct {
		Status struct {
			Devices []struct {
				Driver string         `json:"driver"`
				Pool   string         `json:"pool"`
				Device string         `json:"device"`
				Data   map[string]any `json:"data,omitempty"`
			} `json:"devices"`
		} `json:"status"`
	}
	if err := c.Get(ctx, statusClaim, &claim); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(claim.Status.Devices)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
