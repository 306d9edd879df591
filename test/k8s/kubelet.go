//go:build e2enode

package k8se2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"text/template"
)

// NodeName is the name the kubelet registers under (with --hostname-override);
// static pods are called <name>-<NodeName>.
const NodeName = "cdi-e2e"

var kubeletConfig = template.Must(template.New("").Parse(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {{.Port}}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {{.Healthz}}
tlsCertFile: {{.Cert}}
tlsPrivateKeyFile: {{.Key}}
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: {{.CA}}}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://{{.Runtime}}
cgroupDriver: cgroupfs
cgroupRoot: {{.CgroupRoot}}
failSwapOn: false
makeIPTablesUtilChains: false
staticPodPath: {{.Manifests}}
fileCheckFrequency: 1s
podLogsDir: {{.Logs}}
resolvConf: {{.ResolvConf}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# From 1.35 the kubelet refuses cgroup v1 unless told; machines like the
# one CI runs on mount it.
failCgroupV1: false
{{- if .Gates}}
featureGates:
{{- range $k, $v := .Gates}}
  {{$k}}: {{$v}}
{{- end}}
{{- end}}
`))

// kubelet is how a node runs its kubelet: the config and the flags, so
// it can be started again.
type kubelet struct {
	config    string
	root      string
	manifests string
	port      int // the kubelet API, https on 127.0.0.1
	healthz   int
	args      []string
}

// newKubelet writes the kubelet's config under dir. kubeconfig joins it
// to an API server; empty, it runs standalone.
// gates are the feature gates to set (featureGates).
func newKubelet(dir string, p *pki, runtime, cgroupRoot, kubeconfig string, gates map[string]bool) (*kubelet, error) {
	k := &kubelet{
		config:    filepath.Join(dir, "kubelet.yaml"),
		root:      filepath.Join(dir, "root"),
		manifests: filepath.Join(dir, "manifests"),
	}
	for _, d := range []string{k.root, k.manifests, filepath.Join(dir, "pods")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	k.port, k.healthz = ports[0], ports[1]
	crt, key, err := p.issue("kubelet", NodeName, nil, []net.IP{net.IPv4(127, 0, 0, 1)}, "localhost", NodeName)
	if err != nil {
		return nil, err
	}
	resolv := "/etc/resolv.conf"
	if _, err := os.Stat(resolv); err != nil {
		resolv = `""`
	}
	var conf strings.Builder
	err = kubeletConfig.Execute(&conf, map[string]any{
		"Port": k.port, "Healthz": k.healthz, "Cert": crt, "Key": key, "CA": p.CA(),
		"Runtime": runtime, "CgroupRoot": cgroupRoot, "Manifests": k.manifests,
		"Logs": filepath.Join(dir, "pods"), "ResolvConf": resolv, "Gates": gates,
	})
	if err != nil {
		return nil, err
	}
	k.args = []string{"--config", k.config, "--root-dir", k.root, "--hostname-override", NodeName, "--v", "2"}
	if kubeconfig != "" {
		k.args = append(k.args, "--kubeconfig", kubeconfig)
	}
	return k, os.WriteFile(k.config, []byte(conf.String()), 0o644)
}

// start runs the kubelet and waits until it answers its health check.
func (k *kubelet) start(ctx context.Context, cg *cgroups, logDir string, c *client) (*daemon, error) {
	d, err := spawn(cg, logDir, "kubelet", filepath.Join(tools(), "kubelet"), k.args, nil)
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", k.healthz)
	return d, waitFor(ctx, "the kubelet's health check", func(ctx context.Context) error {
		body, err := c.get(ctx, url)
		if err == nil && string(body) != "ok" {
			err = fmt.Errorf("healthz: %q", body)
		}
		return err
	}, d)
}

// freePorts asks the kernel for n unused TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
