//go:build e2enode

package k8se2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/template"
	"time"
)

// Cluster is a private control plane on 127.0.0.1 with the node joined
// to it: etcd (Debian's etcd-server), kube-apiserver, kube-scheduler and
// kube-controller-manager, all with certificates from the test's own CA.
//
// The service range is 127.0.0.0/28, so the kubernetes Service is
// 127.0.0.1:443, where the API server listens: pods on the host's network
// reach it through the in-cluster config without kube-proxy.
type Cluster struct {
	*Node
	// Kubeconfig is a cluster-admin kubeconfig, for kubectl.
	Kubeconfig string
	admin      *client
	// gates is the control plane's --feature-gates flag (featureGates),
	// "" when the release needs none.
	gates string
	// server is the API server's address: Server, but for a control
	// plane that no node of this machine joins (StartControlPlane).
	server string
}

// Server is the API server's address, the kubernetes Service's too.
const Server = "https://127.0.0.1:443"

// StartCluster starts a control plane and a node joined to it, and waits
// until the node is Ready and the default service account exists. It
// skips t when this machine cannot run them.
func StartCluster(t *testing.T) *Cluster {
	t.Helper()
	preflight(t, "containerd", "containerd-shim-runc-v2", "ctr", "kubelet",
		"kube-apiserver", "kube-scheduler", "kube-controller-manager")
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Fatal("etcd is not installed: apt-get install etcd-server (test/k8s/build-tools.sh does, as root)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:443")
	if err != nil {
		t.Skipf("127.0.0.1:443 is taken (%v): the API server must listen on the kubernetes Service's address", err)
	}
	l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	c := &Cluster{Node: newNode(t), server: Server}
	if err := c.start(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// StartAPIServer starts etcd and the API server alone, with no node
// joined and no scheduler or controllers: enough for what the API server
// decides by itself (admission policies, authorization). Nothing runs
// pods; objects are made and changed through the API. Its API server
// listens on a free port of 127.0.0.1, so it can run beside another
// test's cluster. It skips t when this machine cannot run them.
func StartAPIServer(t *testing.T) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the daemons run in a cgroup of their own")
	}
	if _, err := os.Stat(filepath.Join(tools(), "kube-apiserver")); err != nil {
		t.Fatalf("kube-apiserver is not built: run test/k8s/build-tools.sh (make e2e-node does): %v", err)
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Fatal("etcd is not installed: apt-get install etcd-server (test/k8s/build-tools.sh does, as root)")
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c := &Cluster{Node: newHostNode(t, false), server: fmt.Sprintf("https://127.0.0.1:%d", ports[0])}
	if err := c.startAPI(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *Cluster) start(ctx context.Context) error {
	if err := c.startControlPlane(ctx, controlPlane{}); err != nil {
		return err
	}
	kc, err := c.kubeconfig("kubelet-client", "system:node:"+NodeName, "system:nodes")
	if err != nil {
		return err
	}
	if err := c.Node.start(ctx, kc); err != nil {
		return err
	}
	return c.waitReady(ctx)
}

// controlPlane is what a test changes in how the control plane runs;
// the zero value is the one make e2e-cluster runs.
type controlPlane struct {
	// apiServerArgs are more flags of kube-apiserver (an audit log).
	apiServerArgs []string
	// controllers is kube-controller-manager's --controllers, "" for
	// its default.
	controllers string
	// schedulerArgs are more flags of kube-scheduler (its client's
	// request limits).
	schedulerArgs []string
}

// StartControlPlane starts a control plane with no node of this
// machine, as StartCluster does, with the changes of cp: no kubelet and
// no containerd run. With no pod to reach it at the kubernetes Service's
// address, its API server listens on a free port of 127.0.0.1, so it
// can run beside another test's cluster. It skips t when this machine
// cannot run one.
func StartControlPlane(t *testing.T, cp controlPlane) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the API server listens on 127.0.0.1:443, and the test makes cgroups and device nodes")
	}
	for _, name := range []string{"kube-apiserver", "kube-scheduler", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(tools(), name)); err != nil {
			t.Fatalf("%s is not built: run test/k8s/build-tools.sh (make bench-scale does): %v", name, err)
		}
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Fatal("etcd is not installed: apt-get install etcd-server (test/k8s/build-tools.sh does, as root)")
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	c := &Cluster{Node: newHostNode(t, false), server: fmt.Sprintf("https://127.0.0.1:%d", ports[0])}
	if err := c.startControlPlane(ctx, cp); err != nil {
		t.Fatal(err)
	}
	return c
}

// startControlPlane starts etcd, the API server, the scheduler and the
// controller-manager, and waits until the API server is ready.
func (c *Cluster) startControlPlane(ctx context.Context, cp controlPlane) error {
	if err := c.startAPI(ctx, cp.apiServerArgs); err != nil {
		return err
	}
	for _, comp := range []struct{ name, user string }{
		{"kube-scheduler", "system:kube-scheduler"},
		{"kube-controller-manager", "system:kube-controller-manager"},
	} {
		kc, err := c.kubeconfig(comp.name, comp.user)
		if err != nil {
			return err
		}
		args := []string{"--kubeconfig", kc, "--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", "0"}
		if c.gates != "" {
			args = append(args, c.gates)
		}
		if comp.name == "kube-controller-manager" {
			// Each controller acts as its own service account, with the
			// bootstrap roles made for it (system:controller:*).
			args = append(args, "--use-service-account-credentials", "--root-ca-file", c.pki.CA(),
				"--service-account-private-key-file", filepath.Join(c.pki.dir, "sa.key"))
			if cp.controllers != "" {
				args = append(args, "--controllers", cp.controllers)
			}
		} else {
			args = append(args, cp.schedulerArgs...)
		}
		c.Spawn(comp.name, filepath.Join(tools(), comp.name), args, nil)
	}
	return nil
}

// startAPI starts etcd and the API server, with the feature gates the
// release needs and more of the API server's flags.
func (c *Cluster) startAPI(ctx context.Context, more []string) error {
	dir := filepath.Join(c.Dir, "control-plane")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	etcd, err := c.startEtcd(ctx, dir)
	if err != nil {
		return err
	}
	gates, err := featureGates(ctx, filepath.Join(tools(), "kube-apiserver"))
	if err != nil {
		return err
	}
	if len(gates) > 0 {
		c.gates = "--feature-gates=" + gateFlag(gates)
	}
	return c.startAPIServer(ctx, dir, etcd, more)
}

// startEtcd starts etcd on two free ports and returns its client URL.
func (c *Cluster) startEtcd(ctx context.Context, dir string) (string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return "", err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return "", err
	}
	d := c.Spawn("etcd", bin, []string{
		"--name", "cdi-e2e", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "cdi-e2e=" + peer,
	}, nil)
	plain := &client{http: &http.Client{Timeout: 5 * time.Second}}
	return url, waitFor(ctx, "etcd to be healthy", func(ctx context.Context) error {
		var h struct{ Health string }
		if err := plain.getJSON(ctx, url+"/health", &h); err != nil {
			return err
		}
		if h.Health != "true" {
			return fmt.Errorf("health %q", h.Health)
		}
		return nil
	}, d)
}

func (c *Cluster) startAPIServer(ctx context.Context, dir, etcd string, more []string) error {
	p := c.pki
	lo := []net.IP{net.IPv4(127, 0, 0, 1)}
	crt, key, err := p.issue("apiserver", "kube-apiserver", nil, lo,
		"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
	if err != nil {
		return err
	}
	kcrt, kkey, err := p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil)
	if err != nil {
		return err
	}
	saKey, saPub, err := p.signingKey("sa")
	if err != nil {
		return err
	}
	u, err := url.Parse(c.server)
	if err != nil {
		return err
	}
	args := []string{
		"--etcd-servers", etcd,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", u.Port(),
		"--tls-cert-file", crt, "--tls-private-key-file", key, "--client-ca-file", p.CA(),
		"--kubelet-client-certificate", kcrt, "--kubelet-client-key", kkey,
		"--kubelet-certificate-authority", p.CA(),
		"--service-cluster-ip-range", "127.0.0.0/28",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", saPub, "--service-account-signing-key-file", saKey,
		"--authorization-mode", "Node,RBAC", "--allow-privileged=true",
		"--enable-admission-plugins", "NodeRestriction",
		"--endpoint-reconciler-type", "none", "--profiling=false",
	}
	if c.gates != "" {
		args = append(args, c.gates)
	}
	args = append(args, more...)
	d := c.Spawn("kube-apiserver", filepath.Join(tools(), "kube-apiserver"), args, []string{
		// busybox's wget, which tests run in pods, sends no signature
		// algorithms, so TLS 1.2 falls back to SHA-1 signatures, which Go
		// refuses unless told otherwise.
		"GODEBUG=tlssha1=1",
	})
	adminCrt, adminKey, err := p.issue("admin", "cdi-e2e-admin", []string{"system:masters"}, nil)
	if err != nil {
		return err
	}
	if c.admin, err = newClient(p, adminCrt, adminKey); err != nil {
		return err
	}
	if c.Kubeconfig, err = writeKubeconfig(filepath.Join(dir, "admin.kubeconfig"), c.server, p.CA(), adminCrt, adminKey); err != nil {
		return err
	}
	return waitFor(ctx, "the API server to be ready", func(ctx context.Context) error {
		_, err := c.admin.get(ctx, c.server+"/readyz")
		return err
	}, d)
}

// kubeconfig issues a client certificate for user in groups and writes a
// kubeconfig for it.
func (c *Cluster) kubeconfig(name, user string, groups ...string) (string, error) {
	crt, key, err := c.pki.issue(name, user, groups, nil)
	if err != nil {
		return "", err
	}
	return writeKubeconfig(filepath.Join(c.Dir, "control-plane", name+".kubeconfig"), c.server, c.pki.CA(), crt, key)
}

var kubeconfigTmpl = template.Must(template.New("").Parse(`apiVersion: v1
kind: Config
clusters:
- name: cdi-e2e
  cluster: {server: "{{.Server}}", certificate-authority: "{{.CA}}"}
users:
- name: cdi-e2e
  user: {client-certificate: "{{.Cert}}", client-key: "{{.Key}}"}
contexts:
- name: cdi-e2e
  context: {cluster: cdi-e2e, user: cdi-e2e}
current-context: cdi-e2e
`))

func writeKubeconfig(path, server, ca, cert, key string) (string, error) {
	var b strings.Builder
	err := kubeconfigTmpl.Execute(&b, map[string]string{"Server": server, "CA": ca, "Cert": cert, "Key": key})
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// waitReady waits until the node is Ready without the not-ready taint
// (the controller-manager removes it) and the default service account
// exists (the controller-manager makes it), so pods can be scheduled.
func (c *Cluster) waitReady(ctx context.Context) error {
	err := waitFor(ctx, "node "+NodeName+" to be Ready and untainted", func(ctx context.Context) error {
		var node struct {
			Spec struct {
				Taints []struct{ Key string }
			}
			Status struct {
				Conditions []struct{ Type, Status, Message string }
			}
		}
		if err := c.admin.getJSON(ctx, c.server+"/api/v1/nodes/"+NodeName, &node); err != nil {
			return err
		}
		for _, t := range node.Spec.Taints {
			return fmt.Errorf("tainted %s", t.Key)
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == "Ready" && cond.Status != "True" {
				return fmt.Errorf("not ready: %s", cond.Message)
			}
		}
		return nil
	}, c.Kubelet)
	if err != nil {
		return err
	}
	return waitFor(ctx, "the default service account", func(ctx context.Context) error {
		_, err := c.admin.get(ctx, c.server+"/api/v1/namespaces/default/serviceaccounts/default")
		return err
	}, c.Kubelet)
}

// APIServerMetrics returns the API server's Prometheus metrics.
func (c *Cluster) APIServerMetrics(ctx context.Context) (string, error) {
	b, err := c.admin.get(ctx, c.server+"/metrics")
	return string(b), err
}

// Get decodes the API object at path (such as /api/v1/nodes) into v.
func (c *Cluster) Get(ctx context.Context, path string, v any) error {
	return c.admin.getJSON(ctx, c.server+path, v)
}

// Create posts a JSON object to the collection at path.
func (c *Cluster) Create(ctx context.Context, path string, obj []byte) error {
	_, err := c.admin.do(ctx, http.MethodPost, c.server+path, obj)
	return err
}

// Delete deletes the API object at path.
func (c *Cluster) Delete(ctx context.Context, path string) error {
	_, err := c.admin.do(ctx, http.MethodDelete, c.server+path, nil)
	return err
}

// WaitPod waits until the pod ns/name, as the API server has it,
// satisfies cond.
func (c *Cluster) WaitPod(ctx context.Context, ns, name string, cond func(Pod, bool) error) (Pod, error) {
	var pod Pod
	err := waitFor(ctx, "pod "+ns+"/"+name, func(ctx context.Context) error {
		pod = Pod{}
		err := c.Get(ctx, "/api/v1/namespaces/"+ns+"/pods/"+name, &pod)
		if se, ok := err.(*statusError); ok && se.code == http.StatusNotFound {
			return cond(pod, false)
		}
		if err != nil {
			return err
		}
		return cond(pod, true)
	}, c.Kubelet)
	return pod, err
}

// Kubectl runs kubectl as cluster-admin.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	return run(ctx, []string{"KUBECONFIG=" + c.Kubeconfig}, "kubectl", args...)
}
