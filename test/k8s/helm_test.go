//go:build e2enode

package k8se2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// chart is the Helm chart, in the repository.
const chart = repoRoot + "/deploy/helm/cdi-exec-plugins"

// TestClusterHelm deploys the DRA mode with the chart and the real helm
// (built from its Go module by build-tools.sh), as a cluster admin would,
// with values only where a test must not touch the live node (the host
// directories, the tty reserve, a free metrics port) and without rolling
// updates (TestClusterDRATTYs says why). Then:
//  1. helm lint --strict passes;
//  2. helm install: the driver's pod gets ready (its /readyz), and its
//     ResourceSlice appears;
//  3. the admission policy: the driver's own service-account token (read
//     where the kubelet projected it) may create and delete a slice of
//     its node and a driver *.cdi-exec.io, and gets 403 for another
//     node's slice, for its node's slice in another node's pool, for a
//     foreign driver's, and for changing or deleting another node's (and
//     its node's slice in another node's pool, made by the admin);
//  4. a claim pod runs, and the driver's /metrics count its prepare;
//  5. helm upgrade with a changed plugin config rolls the driver's pod
//     (the config's checksum), while the claim pod keeps running with its
//     claim prepared, and deleting the pod then frees the claim;
//  6. helm uninstall leaves nothing of the release in the cluster, and
//     the node's state (the plugins' stores) stays.
func TestClusterHelm(t *testing.T) {
	ctx, d := newDRARun(t, 10*time.Minute, "helm")
	c := d.c
	h := newHelmRun(t, d)

	out := h.helm(ctx, t, "lint", "--strict", chart)
	t.Logf("helm lint --strict:\n%s", out)

	d.loadImage(ctx, t)
	start := time.Now()
	t.Logf("helm install:\n%s", h.helm(ctx, t, h.values("install", "--create-namespace")...))
	driverPod := d.waitDriver(ctx, t, "")
	slice := d.waitSlice(ctx, t)
	h.waitReady(ctx, t, driverPod)
	t.Logf("driver pod %s ready; its slice lists %v, %.1fs after helm install", driverPod, slice, time.Since(start).Seconds())

	t.Run("admission policy", func(t *testing.T) { h.checkPolicy(ctx, t, driverPod) })

	d.apply(ctx, t, d.exampleManifests(t))
	pod, err := c.WaitPod(ctx, "default", "two-ttys", Running)
	if err != nil {
		t.Fatal(err)
	}
	held, uid := d.checkClaim(ctx, t, pod)
	metrics := h.metrics(ctx, t)
	for _, want := range []string{
		`cdi_exec_prepare_total{driver="tty.cdi-exec.io",result="success"} 1`,
		`cdi_exec_plugin_run_duration_seconds_count{code="0",command="ADD",plugin="generic-tty"} 1`,
		fmt.Sprintf(`cdi_exec_published_devices{driver="tty.cdi-exec.io",health="healthy"} %d`, len(slice)),
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	t.Logf("/metrics after the claim pod:\n%s", excerpt(metrics, "cdi_exec_"))
	// The driver's memory, for the chart's limit (docs/performance.md).
	t.Logf("the driver's memory:\n%s\n%s\n%s", excerpt(metrics, "process_resident_memory_bytes"),
		excerpt(metrics, "go_memstats_heap_inuse_bytes"), excerpt(metrics, "go_memstats_sys_bytes"))

	start = time.Now()
	t.Logf("helm upgrade:\n%s", h.helm(ctx, t, h.values("upgrade", "--set", "types.tty.config.name=virtual consoles (upgraded)")...))
	next := d.waitDriver(ctx, t, driverPod)
	d.waitLog(ctx, t, next, "slice published")
	h.waitReady(ctx, t, next)
	d.stillPrepared(ctx, t, "helm upgrade", pod, held, uid)
	t.Logf("helm upgrade replaced %s by %s in %.1fs; the claim stays prepared", driverPod, next, time.Since(start).Seconds())

	if _, err := c.Kubectl(ctx, "delete", "pod", "two-ttys", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	d.waitFreed(ctx, t, held)
	d.waitLog(ctx, t, next, "unprepare")
	if m := h.metrics(ctx, t); !strings.Contains(m, `cdi_exec_unprepare_total{driver="tty.cdi-exec.io",result="success"} 1`+"\n") {
		t.Errorf("the new driver's /metrics count no unprepare:\n%s", excerpt(m, "cdi_exec_unprepare"))
	}

	start = time.Now()
	t.Logf("helm uninstall:\n%s", h.helm(ctx, t, "uninstall", "cdi", "--namespace", draNamespace, "--wait", "--timeout", "2m"))
	h.checkGone(ctx, t)
	t.Logf("nothing of the release is left %.1fs after helm uninstall", time.Since(start).Seconds())
	if _, err := os.Stat(filepath.Join(d.b.state, "generic-tty.db")); err != nil {
		t.Errorf("the node's state went with the release: %v", err)
	}
}

// helmRun is the chart's release on a cluster.
type helmRun struct {
	d    *draRun
	home string // helm's config, cache and data
	port int    // the metrics and probes
}

func newHelmRun(t *testing.T, d *draRun) *helmRun {
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	h := &helmRun{d: d, home: filepath.Join(d.c.Dir, "helm"), port: ports[0]}
	if err := os.MkdirAll(h.home, 0o755); err != nil {
		t.Fatal(err)
	}
	return h
}

// helm runs helm as cluster-admin, with no user's configuration.
func (h *helmRun) helm(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	env := []string{"KUBECONFIG=" + h.d.c.Kubeconfig,
		"HELM_CONFIG_HOME=" + h.home, "HELM_CACHE_HOME=" + h.home, "HELM_DATA_HOME=" + h.home}
	out, err := run(ctx, env, filepath.Join(tools(), "helm"), args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// values are the arguments of helm install or upgrade (verb) of the
// release cdi, with the test's values and then more.
func (h *helmRun) values(verb string, more ...string) []string {
	args := []string{verb, "cdi", chart, "--namespace", draNamespace,
		"--set", "hostPaths.stateDir=" + h.d.b.state,
		"--set", "hostPaths.claimStateDir=" + h.d.claims,
		"--set", "hostPaths.cdiSpecDir=" + h.d.c.CDIDir,
		"--set", "dra.podUID=false",
		"--set", "types.tty.config.args.num_system_reserved=" + strconv.Itoa(h.d.reserved),
		"--set", "metrics.port=" + strconv.Itoa(h.port),
		// The test's node has only a loopback CNI: a pod on the pod
		// network gets no address the kubelet could probe.
		"--set", "hostNetwork=true",
	}
	return append(args, more...)
}

// endpoint GETs a path of the driver's metrics server.
func (h *helmRun) endpoint(ctx context.Context, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", h.port, path), nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// waitReady waits until the pod is Ready, which its readinessProbe
// (/readyz) decides, and checks both probes' answers.
func (h *helmRun) waitReady(ctx context.Context, t *testing.T, pod string) {
	t.Helper()
	if _, err := h.d.c.WaitPod(ctx, draNamespace, pod, Ready); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body, err := h.endpoint(ctx, path); err != nil || code != http.StatusOK {
			t.Errorf("GET %s: %d %q %v", path, code, body, err)
		}
	}
}

// metrics returns the driver's /metrics.
func (h *helmRun) metrics(ctx context.Context, t *testing.T) string {
	t.Helper()
	code, body, err := h.endpoint(ctx, "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v\n%s", code, err, body)
	}
	return body
}

// excerpt is the lines of a metrics page that begin with prefix.
func excerpt(page, prefix string) string {
	var lines []string
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, prefix) && !strings.Contains(l, "_bucket{") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// token is the driver pod's service-account token, where the kubelet
// projected it.
func (h *helmRun) token(ctx context.Context, t *testing.T, pod string) string {
	t.Helper()
	var p Pod
	if err := h.d.c.Get(ctx, "/api/v1/namespaces/"+draNamespace+"/pods/"+pod, &p); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(h.d.c.kl.root, "pods", p.Metadata.UID, "volumes", "kubernetes.io~projected", "*", "token"))
	if err != nil || len(files) != 1 {
		t.Fatalf("the token of pod %s: %v %v", pod, files, err)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// slice is a ResourceSlice of no devices, in the pool named after its node.
func slice(name, driver, node string) []byte {
	return poolSlice(name, driver, node, node)
}

// poolSlice is a ResourceSlice of no devices in the pool named pool.
func poolSlice(name, driver, node, pool string) []byte {
	return fmt.Appendf(nil, `{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": %q},
 "spec": {"driver": %q, "nodeName": %q, "pool": {"name": %q, "generation": 1, "resourceSliceCount": 1}, "devices": []}}`,
		name, driver, node, pool)
}

// checkPolicy checks the admission policy with the driver's own token.
func (h *helmRun) checkPolicy(ctx context.Context, t *testing.T, pod string) {
	driver, err := newClient(h.d.c.pki, "", "")
	if err != nil {
		t.Fatal(err)
	}
	driver.token = h.token(ctx, t, pod)
	const slices = Server + "/apis/resource.k8s.io/v1/resourceslices"
	forbidden := func(what string, err error) {
		t.Helper()
		var se *statusError
		if !errors.As(err, &se) || se.code != http.StatusForbidden || !strings.Contains(se.body, "ValidatingAdmissionPolicy") {
			t.Errorf("%s with the driver's token: %v, want 403 from the admission policy", what, err)
			return
		}
		t.Logf("%s: %d %s", what, se.code, se.body)
	}

	// What the driver may do: its node's slice of a driver *.cdi-exec.io.
	if _, err := driver.do(ctx, http.MethodPost, slices, slice("cdi-e2e-own", "probe.cdi-exec.io", NodeName)); err != nil {
		t.Fatalf("the driver's token may not create its own node's slice: %v", err)
	}
	if _, err := driver.do(ctx, http.MethodDelete, slices+"/cdi-e2e-own", nil); err != nil {
		t.Errorf("the driver's token may not delete its own node's slice: %v", err)
	}

	_, err = driver.do(ctx, http.MethodPost, slices, slice("cdi-e2e-other-node", draDriver, "other-node"))
	forbidden("a slice for another node", err)
	_, err = driver.do(ctx, http.MethodPost, slices, slice("cdi-e2e-foreign", "gpu.example.com", NodeName))
	forbidden("a slice of a foreign driver", err)
	// Its node's slice, but another node's pool: the scheduler counts
	// devices in use by driver, pool and device, so such a slice could
	// mark the other node's devices taken.
	_, err = driver.do(ctx, http.MethodPost, slices, poolSlice("cdi-e2e-other-pool", draDriver, NodeName, "other-node"))
	forbidden("a slice of its node in another node's pool", err)

	// Another node's slice, made by the admin.
	if err := h.d.c.Create(ctx, "/apis/resource.k8s.io/v1/resourceslices", slice("cdi-e2e-theirs", draDriver, "other-node")); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.d.c.Delete(ctx, "/apis/resource.k8s.io/v1/resourceslices/cdi-e2e-theirs"); err != nil {
			t.Error(err)
		}
	}()
	var theirs map[string]any
	if err := h.d.c.Get(ctx, "/apis/resource.k8s.io/v1/resourceslices/cdi-e2e-theirs", &theirs); err != nil {
		t.Fatal(err)
	}
	meta := theirs["metadata"].(map[string]any)
	// (spec.nodeName is immutable: the driver cannot take the slice, only
	// change what it says.)
	changed := fmt.Appendf(nil, `{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "cdi-e2e-theirs", "resourceVersion": %q},
 "spec": {"driver": %q, "nodeName": "other-node", "pool": {"name": "other-node", "generation": 2, "resourceSliceCount": 1}, "devices": []}}`,
		meta["resourceVersion"], draDriver)
	_, err = driver.do(ctx, http.MethodPut, slices+"/cdi-e2e-theirs", changed)
	forbidden("changing another node's slice", err)
	_, err = driver.do(ctx, http.MethodDelete, slices+"/cdi-e2e-theirs", nil)
	forbidden("deleting another node's slice", err)

	// Its node's slice in another node's pool, made by the admin (of a
	// driver *.cdi-exec.io that does not run, whose slice controller would
	// otherwise try to delete it): the driver may not delete it.
	if err := h.d.c.Create(ctx, "/apis/resource.k8s.io/v1/resourceslices", poolSlice("cdi-e2e-squat", "probe.cdi-exec.io", NodeName, "other-node")); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.d.c.Delete(ctx, "/apis/resource.k8s.io/v1/resourceslices/cdi-e2e-squat"); err != nil {
			t.Error(err)
		}
	}()
	_, err = driver.do(ctx, http.MethodDelete, slices+"/cdi-e2e-squat", nil)
	forbidden("deleting its node's slice in another node's pool", err)
}

// checkGone waits until nothing the release made is in the cluster: its
// objects (by the instance label), the driver's pods and slices, and
// helm's record of the release.
func (h *helmRun) checkGone(ctx context.Context, t *testing.T) {
	t.Helper()
	const instance = "?labelSelector=app.kubernetes.io%2Finstance%3Dcdi"
	lists := []string{
		"/apis/apps/v1/namespaces/" + draNamespace + "/daemonsets" + instance,
		"/api/v1/namespaces/" + draNamespace + "/serviceaccounts" + instance,
		"/api/v1/namespaces/" + draNamespace + "/configmaps" + instance,
		"/api/v1/namespaces/" + draNamespace + "/pods" + instance,
		"/apis/rbac.authorization.k8s.io/v1/clusterroles" + instance,
		"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings" + instance,
		"/apis/resource.k8s.io/v1/deviceclasses" + instance,
		"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies" + instance,
		"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings" + instance,
		"/api/v1/namespaces/" + draNamespace + "/secrets?labelSelector=owner%3Dhelm%2Cname%3Dcdi",
		"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3D" + draDriver,
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err := waitFor(ctx, "the release to be gone", func(ctx context.Context) error {
		for _, l := range lists {
			var list struct {
				Items []struct {
					Metadata struct{ Name string }
				}
			}
			if err := h.d.c.Get(ctx, l, &list); err != nil {
				return err
			}
			if len(list.Items) > 0 {
				return fmt.Errorf("%s: %d left, %s first", l, len(list.Items), list.Items[0].Metadata.Name)
			}
		}
		return nil
	}, h.d.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
}
