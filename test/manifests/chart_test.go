package manifests

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

var update = flag.Bool("update", false, "render deploy/ from the chart (make manifests)")

// chart is the Helm chart; deploy/ is rendered from it.
const chart = deploy + "/helm/cdi-exec-plugins"

// Rendered are the files of deploy/ that the chart renders, with the
// release name "cdi" in the namespace of deploy/00-namespace.yaml: each
// is one template, with the values that make it.
var rendered = []struct {
	file, template string
	values         []string
}{
	{"10-rbac.yaml", "rbac.yaml", nil},
	{"20-configmap.yaml", "configmap.yaml", nil},
	{"30-daemonset.yaml", "daemonset.yaml", nil},
	{"40-deviceclasses.yaml", "deviceclasses.yaml", nil},
	{"50-admissionpolicy.yaml", "admissionpolicy.yaml", nil},
	{"device-plugin/daemonset.yaml", "daemonset.yaml", []string{"mode=device-plugin"}},
}

const renderedHeader = `# Rendered from the Helm chart deploy/helm/cdi-exec-plugins by make
# manifests (helm template cdi -n cdi-exec%s --show-only templates/%s).
# Edit the chart, not this file: make test fails when they differ.
`

// helm runs the helm binary that make test builds (CDI_TEST_HELM).
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv("CDI_TEST_HELM")
	if bin == "" {
		t.Skip("CDI_TEST_HELM is not set: make test builds helm (test/k8s/build-tools.sh helm) and sets it")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	// No user's helm configuration or cache plays a part.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// template renders the chart with the values set; a value that starts
// with -- is a flag of helm template (--kube-version=1.33.0).
func template(t *testing.T, values ...string) (string, error) {
	args := []string{"template", "cdi", chart, "--namespace", namespace}
	for _, v := range values {
		if strings.HasPrefix(v, "--") {
			args = append(args, v)
		} else {
			args = append(args, "--set", v)
		}
	}
	return helm(t, args...)
}

// TestChartRendersDeploy checks that each rendered file of deploy/ is what
// the chart renders; with -update it writes them.
func TestChartRendersDeploy(t *testing.T) {
	for _, r := range rendered {
		args := []string{"template", "cdi", chart, "--namespace", namespace, "--show-only", "templates/" + r.template}
		set := ""
		for _, v := range r.values {
			args = append(args, "--set", v)
			set += " --set " + v
		}
		out, err := helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(renderedHeader, set, r.template) + strings.TrimPrefix(out, "---\n")
		path := filepath.Join(deploy, r.file)
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("deploy/%s is not what the chart renders: run make manifests\n--- rendered:\n%s", r.file, want)
		}
	}
}

// TestChartLint runs helm lint --strict on the chart in both modes.
func TestChartLint(t *testing.T) {
	for _, mode := range []string{"dra", "device-plugin"} {
		if out, err := helm(t, "lint", "--strict", chart, "--set", "mode="+mode); err != nil {
			t.Errorf("mode %s: %v\n%s", mode, err, out)
		}
	}
}

// rendering is what the chart renders with some values, read strictly as
// k8s.io/api types.
func rendering(t *testing.T, values ...string) []Object {
	t.Helper()
	out, err := template(t, values...)
	if err != nil {
		t.Fatal(err)
	}
	return loadRendered(t, out)
}

// loadRendered reads what helm rendered strictly as k8s.io/api types.
func loadRendered(t *testing.T, out string) []Object {
	t.Helper()
	path := filepath.Join(t.TempDir(), "chart.yaml")
	if err := writeFile(path, out); err != nil {
		t.Fatal(err)
	}
	objs, err := Load(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return objs
}

func container(t *testing.T, objs []Object) corev1.Container {
	t.Helper()
	return find[*appsv1.DaemonSet](t, objs).Spec.Template.Spec.Containers[0]
}

func count[T any](objs []Object) int {
	n := 0
	for _, o := range objs {
		if _, ok := o.Obj.(T); ok {
			n++
		}
	}
	return n
}

// TestChartValues checks what the values change in the rendered objects.
func TestChartValues(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		objs := rendering(t)
		c := container(t, objs)
		for _, arg := range []string{"--metrics-address=:9470", "--pod-uid=$(POD_UID)", "--v=0", "--logging-format=text"} {
			if !slices.Contains(c.Args, arg) {
				t.Errorf("args %q lack %s", c.Args, arg)
			}
		}
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("probes %+v %+v", c.LivenessProbe, c.ReadinessProbe)
		}
		if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9470 || c.Ports[0].Name != "metrics" {
			t.Errorf("ports %+v", c.Ports)
		}
		if c.StartupProbe == nil || c.StartupProbe.HTTPGet.Path != "/healthz" {
			t.Errorf("startup probe %+v", c.StartupProbe)
		}
		ds := find[*appsv1.DaemonSet](t, objs)
		pod := ds.Spec.Template.Spec
		if pod.PriorityClassName != "system-node-critical" {
			t.Errorf("priority class %q", pod.PriorityClassName)
		}
		// The pod network: the metrics port is a pod port, so a node's
		// new pod starts beside the old one.
		if pod.HostNetwork || pod.DNSPolicy != "" {
			t.Errorf("hostNetwork %v, dnsPolicy %q; want the pod network", pod.HostNetwork, pod.DNSPolicy)
		}
		if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge.IntValue() != 1 || ru.MaxUnavailable.IntValue() != 0 {
			t.Errorf("update strategy %+v, want a surge on the pod network", ds.Spec.UpdateStrategy)
		}
		if n := count[*admissionv1.ValidatingAdmissionPolicy](objs); n != 2 {
			t.Errorf("%d admission policies, want the slices' and the claim status's", n)
		}
		// The policy keeps a node's driver to its node's pool, before and
		// after the request.
		vap := policy(t, objs, "cdi-resourceslices")
		if !slices.ContainsFunc(vap.Spec.Validations, func(v admissionv1.Validation) bool {
			return strings.Contains(v.Expression, "object.spec.pool.name == variables.node") &&
				strings.Contains(v.Expression, "oldObject.spec.pool.name == variables.node")
		}) {
			t.Errorf("no validation of spec.pool.name in %+v", vap.Spec.Validations)
		}
	})
	t.Run("admission policy off, acknowledged", func(t *testing.T) {
		values := []string{"dra.admissionPolicy.enabled=false", "dra.admissionPolicy.acknowledgeDisabled=true"}
		if n := count[*admissionv1.ValidatingAdmissionPolicy](rendering(t, values...)); n != 0 {
			t.Errorf("%d admission policies", n)
		}
		out, err := helm(t, append([]string{"install", "cdi", chart, "--dry-run=client", "--namespace", namespace}, "--set", values[0], "--set", values[1])...)
		if err != nil || !strings.Contains(out, "WARNING: dra.admissionPolicy.enabled=false") {
			t.Errorf("NOTES without the warning: %v\n%s", err, out)
		}
	})
	t.Run("device-plugin", func(t *testing.T) {
		objs := rendering(t, "mode=device-plugin")
		for name, n := range map[string]int{
			"DeviceClass":               count[*resourceapi.DeviceClass](objs),
			"ServiceAccount":            count[*corev1.ServiceAccount](objs),
			"ValidatingAdmissionPolicy": count[*admissionv1.ValidatingAdmissionPolicy](objs),
		} {
			if n != 0 {
				t.Errorf("%d of %s in the device-plugin mode", n, name)
			}
		}
		ds := find[*appsv1.DaemonSet](t, objs)
		if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge.IntValue() != 0 || ru.MaxUnavailable.IntValue() != 1 {
			t.Errorf("the device-plugin mode serves a resource from one pod at a time; update strategy %+v", ds.Spec.UpdateStrategy)
		}
		// Its own port, so that both modes may run on one node.
		if c := container(t, objs); !slices.Contains(c.Args, "--metrics-address=:9471") || c.Ports[0].ContainerPort != 9471 {
			t.Errorf("the device-plugin mode's metrics: %q %+v, want port 9471", c.Args, c.Ports)
		}
		// It runs on releases without DRA.
		if _, err := template(t, "mode=device-plugin", "--kube-version=1.33.0"); err != nil {
			t.Errorf("the device-plugin mode on 1.33: %v", err)
		}
	})
	t.Run("surge with metrics", func(t *testing.T) {
		// A surge is allowed with metrics on the pod network.
		ds := find[*appsv1.DaemonSet](t, rendering(t, "updateStrategy.rollingUpdate.maxSurge=2", "updateStrategy.rollingUpdate.maxUnavailable=0"))
		if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge.IntValue() != 2 {
			t.Errorf("update strategy %+v, want the values' surge", ds.Spec.UpdateStrategy)
		}
	})
	t.Run("host network", func(t *testing.T) {
		for _, metrics := range []bool{true, false} {
			objs := rendering(t, "hostNetwork=true", fmt.Sprintf("metrics.enabled=%v", metrics))
			ds := find[*appsv1.DaemonSet](t, objs)
			pod := ds.Spec.Template.Spec
			c := pod.Containers[0]
			if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet || len(c.Ports) != 0 {
				t.Errorf("hostNetwork %v, dnsPolicy %q, ports %+v", pod.HostNetwork, pod.DNSPolicy, c.Ports)
			}
			flag := "--probe-address=127.0.0.1:9470"
			if metrics {
				flag = "--metrics-address=127.0.0.1:9470"
			}
			if !slices.Contains(c.Args, flag) {
				t.Errorf("args %q lack %s: on the host's network only localhost", c.Args, flag)
			}
			for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
				if p == nil || p.HTTPGet.Host != "127.0.0.1" || p.HTTPGet.Port.IntValue() != 9470 {
					t.Errorf("probe %+v, want 127.0.0.1:9470", p)
				}
			}
			if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge.IntValue() != 0 || ru.MaxUnavailable.IntValue() != 1 {
				t.Errorf("update strategy %+v, want no surge on the host's network", ds.Spec.UpdateStrategy)
			}
		}
	})
	t.Run("scheduling and resources", func(t *testing.T) {
		objs := rendering(t, "nodeSelector.gpu=yes", "tolerations[0].operator=Exists", "priorityClassName=high",
			"resources.limits.memory=64Mi", "updateStrategy.type=OnDelete", "podAnnotations.a=b", "podLabels.team=x")
		ds := find[*appsv1.DaemonSet](t, objs)
		pod := ds.Spec.Template.Spec
		if pod.NodeSelector["gpu"] != "yes" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Operator != corev1.TolerationOpExists || pod.PriorityClassName != "high" {
			t.Errorf("node selector %v, tolerations %+v, priority class %q", pod.NodeSelector, pod.Tolerations, pod.PriorityClassName)
		}
		if m := pod.Containers[0].Resources.Limits.Memory(); m.String() != "64Mi" {
			t.Errorf("memory limit %v", m)
		}
		if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
			t.Errorf("update strategy %+v", ds.Spec.UpdateStrategy)
		}
		if ds.Spec.Template.Annotations["a"] != "b" || ds.Spec.Template.Labels["team"] != "x" || ds.Spec.Template.Annotations["checksum/config"] == "" {
			t.Errorf("pod annotations %v, labels %v", ds.Spec.Template.Annotations, ds.Spec.Template.Labels)
		}
	})
	t.Run("metrics off", func(t *testing.T) {
		// No /metrics, but the probes stay, on their own address.
		c := container(t, rendering(t, "metrics.enabled=false"))
		if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--metrics-address") }) || !slices.Contains(c.Args, "--probe-address=:9470") {
			t.Errorf("metrics off: args %q", c.Args)
		}
		if len(c.Ports) != 1 || c.Ports[0].Name != "probes" || c.Ports[0].ContainerPort != 9470 {
			t.Errorf("metrics off: ports %+v", c.Ports)
		}
		for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
			if p == nil || p.HTTPGet.Port.String() != "probes" {
				t.Errorf("metrics off: probe %+v", p)
			}
		}
	})
	t.Run("no pod uid", func(t *testing.T) {
		objs := rendering(t, "dra.podUID=false")
		if slices.Contains(container(t, objs).Args, "--pod-uid=$(POD_UID)") {
			t.Error("--pod-uid with dra.podUID=false")
		}
		if ru := find[*appsv1.DaemonSet](t, rendering(t, "dra.podUID=false")).Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge.IntValue() != 0 {
			t.Errorf("a surge without --pod-uid: %+v", ru)
		}
	})
	// A node's agent reads only what is scoped to its node: whatever the
	// mode, no role lets it list or watch anything that grows with the
	// cluster. Its own ResourceSlices are the one kind it lists and
	// watches, by a field selector on its node (docs/kubernetes.md#what-the-driver-reads).
	t.Run("node-scoped reads", func(t *testing.T) {
		for _, values := range [][]string{nil, {"mode=device-plugin"}} {
			objs := rendering(t, values...)
			var rules []rbacv1.PolicyRule
			for _, r := range findAll[*rbacv1.ClusterRole](objs) {
				rules = append(rules, r.Rules...)
			}
			for _, r := range findAll[*rbacv1.Role](objs) {
				rules = append(rules, r.Rules...)
			}
			if values == nil && len(rules) == 0 {
				t.Fatal("the dra mode renders no role")
			}
			for _, r := range rules {
				wide := slices.ContainsFunc(r.Verbs, func(v string) bool { return v == "list" || v == "watch" || v == "*" })
				if !wide {
					continue
				}
				if !slices.Equal(r.Resources, []string{"resourceslices"}) || !slices.Equal(r.APIGroups, []string{"resource.k8s.io"}) {
					t.Errorf("%v: the rule %v %v %v lists or watches what grows with the cluster", values, r.APIGroups, r.Resources, r.Verbs)
				}
			}
		}
	})
	t.Run("host paths and suffix", func(t *testing.T) {
		objs := rendering(t, "hostPaths.kubeletDir=/var/lib/k0s/kubelet", "driverSuffix=example.com", "types.tty.extendedResourceName=")
		c := container(t, objs)
		if !slices.Contains(c.Args, "--kubelet-dir=/var/lib/k0s/kubelet") || !slices.Contains(c.Args, "--driver-suffix=example.com") {
			t.Errorf("args %q", c.Args)
		}
		checkMounts(t, find[*appsv1.DaemonSet](t, objs).Spec.Template.Spec, map[string]string{
			"/var/lib/k0s/kubelet/plugins/gpu.example.com": "/var/lib/k0s/kubelet/plugins/gpu.example.com",
			"/var/lib/k0s/kubelet/plugins_registry":        "/var/lib/k0s/kubelet/plugins_registry",
		})
		for _, o := range objs {
			if dc, ok := o.Obj.(*resourceapi.DeviceClass); ok && dc.Name == "tty.example.com" && dc.Spec.ExtendedResourceName != nil {
				t.Errorf("DeviceClass %s: extendedResourceName %q, set empty", dc.Name, *dc.Spec.ExtendedResourceName)
			}
		}
		vap := policy(t, objs, "cdi-resourceslices")
		if last := vap.Spec.Validations[len(vap.Spec.Validations)-1].Expression; !strings.Contains(last, "'.example.com'") {
			t.Errorf("the policy's driver check %q is not for the suffix", last)
		}
	})
	t.Run("service monitor", func(t *testing.T) {
		out, err := template(t, "metrics.serviceMonitor.enabled=true")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "kind: ServiceMonitor") || !strings.Contains(out, "clusterIP: None") {
			t.Errorf("no ServiceMonitor and headless Service:\n%s", out)
		}
	})
	t.Run("sriov", func(t *testing.T) {
		// An sriov type makes /sys/devices and /sys/bus/pci writable, and
		// nothing else changes in the DaemonSet but its configs.
		sriov := []string{"types.vf.config.cdiVersion=0.0.2", "types.vf.config.type=vf", "types.vf.config.plugin=sriov", "types.vf.config.name=VFs"}
		base := find[*appsv1.DaemonSet](t, rendering(t))
		ds := find[*appsv1.DaemonSet](t, rendering(t, sriov...))
		pod := ds.Spec.Template.Spec
		checkMounts(t, pod, map[string]string{"/host/sys": "/sys", "/host/sys/devices": "/sys/devices", "/host/sys/bus/pci": "/sys/bus/pci"}, "/host/sys")
		// (plugin-vf is the new type's socket directory, as any type has.)
		added := []string{"host-sys-devices", "host-sys-bus-pci", "plugin-vf"}
		pod.Volumes = slices.DeleteFunc(pod.Volumes, func(v corev1.Volume) bool { return slices.Contains(added, v.Name) })
		c := &pod.Containers[0]
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return slices.Contains(added, m.Name) })
		// The configs: one more item, and so another checksum.
		for _, p := range []*corev1.PodSpec{&pod, &base.Spec.Template.Spec} {
			for i := range p.Volumes {
				if p.Volumes[i].ConfigMap != nil {
					p.Volumes[i].ConfigMap.Items = nil
				}
			}
		}
		ds.Spec.Template.Spec = pod
		ds.Spec.Template.Annotations["checksum/config"] = base.Spec.Template.Annotations["checksum/config"]
		if !equality.Semantic.DeepEqual(base, ds) {
			a, _ := json.MarshalIndent(base.Spec, "", " ")
			b, _ := json.MarshalIndent(ds.Spec, "", " ")
			t.Errorf("with an sriov type the DaemonSet differs beyond the sysfs mounts:\n%s\n--- with sriov:\n%s", a, b)
		}
		// Without one, nothing of /sys is writable.
		for _, m := range base.Spec.Template.Spec.Containers[0].VolumeMounts {
			if strings.HasPrefix(m.MountPath, "/host/sys") && !m.ReadOnly {
				t.Errorf("%s is writable without an sriov type", m.MountPath)
			}
		}
	})
	t.Run("config change rolls the pods", func(t *testing.T) {
		sum := func(values ...string) string {
			return find[*appsv1.DaemonSet](t, rendering(t, values...)).Spec.Template.Annotations["checksum/config"]
		}
		before, after := sum(), sum("types.tty.config.args.num_system_reserved=20")
		if before == "" || before == after {
			t.Errorf("checksum/config %q, after a config change %q", before, after)
		}
	})
}

// TestChartRefuses checks that values the chart cannot render are refused
// with a message that says which.
func TestChartRefuses(t *testing.T) {
	for _, tt := range []struct {
		values []string
		want   string
	}{
		{[]string{"mode=both"}, "/mode"},
		{[]string{"types.tty.config.type=serial"}, "types.tty.config.type"},
		{[]string{"logging.format=xml"}, "/logging/format"},
		{[]string{"dra.taintEffect=Evict"}, "/dra/taintEffect"},
		{[]string{"dra.prepareAhead=true"}, "prepareAhead"},
		{[]string{"metrics.port=0"}, "/metrics/port"},
		{[]string{"hostPaths.kubeletDir=var/lib/kubelet"}, "/hostPaths/kubeletDir"},
		{[]string{"loging.format=json"}, "loging"},
		{[]string{"--kube-version=1.34.0"}, "mode dra needs Kubernetes 1.35 or later"},
		{[]string{"hostNetwork=true", "updateStrategy.rollingUpdate.maxSurge=1"}, "with hostNetwork=true a surge pod cannot listen"},
		{[]string{"hostNetwork=true", "metrics.serviceMonitor.enabled=true"}, "metrics listen on 127.0.0.1 only"},
		{[]string{"dra.admissionPolicy.enabled=false"}, "dra.admissionPolicy.acknowledgeDisabled=true"},
	} {
		if out, err := template(t, tt.values...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error naming %s\n%s", tt.values, err, tt.want, out)
		}
	}
}

// policy returns the ValidatingAdmissionPolicy named name.
func policy(t *testing.T, objs []Object, name string) *admissionv1.ValidatingAdmissionPolicy {
	t.Helper()
	for _, o := range objs {
		if p, ok := o.Obj.(*admissionv1.ValidatingAdmissionPolicy); ok && p.Name == name {
			return p
		}
	}
	t.Fatalf("no ValidatingAdmissionPolicy %s", name)
	return nil
}

// TestChartClaimStatusRBAC: the driver writes claims' status.devices; from
// 1.36, where the API server authorizes them per driver, it gets
// resourceclaims/driver for its own drivers and only with the
// associated-node verbs, and on 1.35 it has no such rule (the admission
// policy of the claim status covers that release).
func TestChartClaimStatusRBAC(t *testing.T) {
	for _, tt := range []struct {
		kube string
		want bool
	}{{"--kube-version=1.35.4", false}, {"--kube-version=1.36.0", true}, {"--kube-version=1.37.2", true}} {
		objs := rendering(t, tt.kube, "driverSuffix=example.com")
		var driverRule *rbacv1.PolicyRule
		status := false
		for _, r := range find[*rbacv1.ClusterRole](t, objs).Rules {
			switch {
			case slices.Equal(r.Resources, []string{"resourceclaims/driver"}):
				driverRule = &r
			case slices.Equal(r.Resources, []string{"resourceclaims/status"}) && slices.Equal(r.Verbs, []string{"patch"}):
				status = true
			}
		}
		if !status {
			t.Errorf("%s: no patch of resourceclaims/status", tt.kube)
		}
		if (driverRule != nil) != tt.want {
			t.Fatalf("%s: resourceclaims/driver rule %+v, want one: %v", tt.kube, driverRule, tt.want)
		}
		if driverRule != nil {
			if !slices.Equal(driverRule.Verbs, []string{"associated-node:patch", "associated-node:update"}) ||
				!slices.Equal(driverRule.ResourceNames, []string{"gpu.example.com", "tty.example.com"}) {
				t.Errorf("%s: resourceclaims/driver rule %+v", tt.kube, driverRule)
			}
		}
		p := policy(t, objs, "cdi-claimstatus")
		if r := p.Spec.MatchConstraints.ResourceRules; len(r) != 1 || !slices.Equal(r[0].Resources, []string{"resourceclaims/status"}) {
			t.Errorf("%s: the claim status policy matches %+v", tt.kube, r)
		}
	}
}

// The generic plugin's kvm, fuse and tun types are off by default; one
// turned on gets its config (a generic config of its type, in
// kvm.d/generic.conf), its mount and its DeviceClass, and nothing else
// changes.
func TestChartGenericTypes(t *testing.T) {
	classes := func(objs []Object) []string {
		var out []string
		for _, o := range objs {
			if c, ok := o.Obj.(*resourceapi.DeviceClass); ok {
				out = append(out, c.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	off := rendering(t)
	if got := classes(off); !slices.Equal(got, []string{"gpu.cdi-exec.io", "tty.cdi-exec.io"}) {
		t.Errorf("default DeviceClasses %v", got)
	}
	if _, ok := find[*corev1.ConfigMap](t, off).Data["kvm.conf"]; ok {
		t.Error("kvm configured by default")
	}
	on := rendering(t, "types.kvm.enabled=true")
	if got := classes(on); !slices.Equal(got, []string{"gpu.cdi-exec.io", "kvm.cdi-exec.io", "tty.cdi-exec.io"}) {
		t.Errorf("DeviceClasses with kvm %v", got)
	}
	conf := find[*corev1.ConfigMap](t, on).Data["kvm.conf"]
	for _, want := range []string{`"plugin": "generic"`, `"type": "kvm"`, `"/dev/kvm"`, `"shares": 8`} {
		if !strings.Contains(conf, want) {
			t.Errorf("kvm.conf lacks %s:\n%s", want, conf)
		}
	}
	paths := configPaths(t, on)
	if !slices.Contains(paths, "kvm.d/generic.conf") {
		t.Errorf("config paths %v lack kvm.d/generic.conf", paths)
	}
}

// The pgpu type (drm's VFIO mode, whole GPUs for VMs) is off by default;
// turned on it gets its DeviceClass, which selects its driver, and its
// config in pgpu.d/drm.conf: conf/examples/pgpu.d/pgpu.conf's, less the
// example's CDI kind (the chart's kind is <driverSuffix>/<type>).
func TestChartPGPUType(t *testing.T) {
	off := rendering(t)
	for _, c := range findAll[*resourceapi.DeviceClass](off) {
		if c.Name == "pgpu.cdi-exec.io" {
			t.Error("the pgpu DeviceClass renders by default")
		}
	}
	if _, ok := find[*corev1.ConfigMap](t, off).Data["pgpu.conf"]; ok {
		t.Error("pgpu configured by default")
	}

	on := rendering(t, "types.pgpu.enabled=true")
	var class *resourceapi.DeviceClass
	for _, c := range findAll[*resourceapi.DeviceClass](on) {
		if c.Name == "pgpu.cdi-exec.io" {
			class = c
		}
	}
	if class == nil {
		t.Fatal("types.pgpu.enabled=true renders no DeviceClass pgpu.cdi-exec.io")
	}
	if s := class.Spec.Selectors; len(s) != 1 || s[0].CEL == nil || s[0].CEL.Expression != `device.driver == "pgpu.cdi-exec.io"` {
		t.Errorf("the pgpu DeviceClass selects %+v", s)
	}
	if class.Spec.ExtendedResourceName == nil || *class.Spec.ExtendedResourceName != "cdi-exec.io/pgpu" {
		t.Errorf("the pgpu DeviceClass's extendedResourceName is %v", class.Spec.ExtendedResourceName)
	}

	type conf struct {
		Type, Plugin string
		Args         map[string]any
	}
	var got, want conf
	if err := json.Unmarshal([]byte(find[*corev1.ConfigMap](t, on).Data["pgpu.conf"]), &got); err != nil {
		t.Fatalf("pgpu.conf: %v", err)
	}
	b, err := os.ReadFile("../../conf/examples/pgpu.d/pgpu.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	delete(want.Args, "cdi_spec")
	if got.Type != "pgpu" || got.Plugin != "drm" || fmt.Sprint(got.Args) != fmt.Sprint(want.Args) {
		t.Errorf("the chart's pgpu config %+v is not conf/examples/pgpu.d/pgpu.conf's %+v", got, want)
	}
	paths := configPaths(t, on)
	if !slices.Contains(paths, "pgpu.d/drm.conf") {
		t.Errorf("config paths %v lack pgpu.d/drm.conf", paths)
	}
}

// TestChartContainerEditsMounts: a type whose config's container_edits
// mount host paths (the driver's user space) gets each path mounted
// read-only under /host, where the plugin checks it exists before it
// writes it into a spec; a path two types mount is mounted once; without
// container_edits there is no such mount.
func TestChartContainerEditsMounts(t *testing.T) {
	conf := func(typ, path string) string {
		return fmt.Sprintf(`--set-json=types.%s={"config":{"cdiVersion":"0.0.2","name":"%s","type":"%s","plugin":"drm","args":{"want_device_nodes":[],"cdi_spec":{"kind":"example.com/%s","container_edits":{"env":["LD_LIBRARY_PATH=%s/lib64"],"mounts":[{"hostPath":"%s","containerPath":"%s","options":["ro","rbind"]}]}}}}}`, typ, typ, typ, typ, path, path, path)
	}
	objs := rendering(t, conf("cuda", "/usr/local/nvidia"), conf("cuda2", "/usr/local/nvidia"), conf("smi", "/usr/bin/nvidia-smi"))
	pod := find[*appsv1.DaemonSet](t, objs).Spec.Template.Spec
	got := map[string]string{}
	for _, m := range pod.Containers[0].VolumeMounts {
		if strings.HasPrefix(m.Name, "edits-") {
			if !m.ReadOnly {
				t.Errorf("mount %s is writable", m.Name)
			}
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.HostPath != nil {
					got[m.MountPath] = v.HostPath.Path
				}
			}
		}
	}
	want := map[string]string{"/host/usr/local/nvidia": "/usr/local/nvidia", "/host/usr/bin/nvidia-smi": "/usr/bin/nvidia-smi"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("container_edits mounts %v, want %v", got, want)
	}
	for _, m := range container(t, rendering(t)).VolumeMounts {
		if strings.HasPrefix(m.Name, "edits-") {
			t.Fatalf("the defaults mount %s", m.MountPath)
		}
	}
	if _, err := template(t, `--set-json=types.cuda={"config":{"cdiVersion":"0.0.2","name":"c","type":"cuda","plugin":"drm","args":{"cdi_spec":{"kind":"example.com/cuda","container_edits":{"devices":[]}}}}}`); err == nil {
		t.Fatal("a container_edits member the plugin refuses rendered")
	}
}

// TestChartBootID: drm's discovery cache keys on the host's boot id, read
// under CDI_HOST_ROOT, so with a drm type the host's boot_id file is
// mounted read-only where the plugin reads it; without one it is not.
func TestChartBootID(t *testing.T) {
	for _, tt := range []struct {
		values []string
		want   bool
	}{
		{nil, true},
		{[]string{"types.gpu=null"}, false},
		{[]string{"mode=device-plugin"}, true},
		{[]string{"mode=device-plugin", "types.gpu=null"}, false},
	} {
		objs := rendering(t, tt.values...)
		pod := find[*appsv1.DaemonSet](t, objs).Spec.Template.Spec
		c := container(t, objs)
		var root string
		for _, e := range c.Env {
			if e.Name == "CDI_HOST_ROOT" {
				root = e.Value
			}
		}
		want := root + "/proc/sys/kernel/random/boot_id"
		var name string
		for _, m := range c.VolumeMounts {
			if m.MountPath == want {
				if !m.ReadOnly {
					t.Errorf("%v: %s is mounted writable", tt.values, want)
				}
				name = m.Name
			}
		}
		if (name != "") != tt.want {
			t.Errorf("%v: %s mounted: %v, want %v", tt.values, want, name != "", tt.want)
			continue
		}
		if !tt.want {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == name && (v.HostPath == nil || v.HostPath.Path != "/proc/sys/kernel/random/boot_id" ||
				v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathFile) {
				t.Errorf("%v: volume %+v", tt.values, v)
			}
		}
	}
}

// TestChartProcDriver: a drm type reads each NVIDIA GPU's minor and UUID
// from the host's /proc/driver/nvidia, so with one the host's /proc/driver
// is mounted read-only under /host; without one it is not.
func TestChartProcDriver(t *testing.T) {
	for _, tt := range []struct {
		values []string
		want   bool
	}{{nil, true}, {[]string{"types.gpu=null"}, false}} {
		found := false
		pod := find[*appsv1.DaemonSet](t, rendering(t, tt.values...)).Spec.Template.Spec
		devices := false
		for _, m := range pod.Containers[0].VolumeMounts {
			switch m.MountPath {
			case "/host/proc/driver":
				found = m.ReadOnly
			case "/host/proc/devices":
				devices = m.ReadOnly
			}
		}
		if devices != tt.want {
			t.Errorf("%v: /host/proc/devices mounted read-only: %v, want %v", tt.values, devices, tt.want)
		}
		for _, v := range pod.Volumes {
			if v.Name == "host-proc-driver" && (v.HostPath == nil || v.HostPath.Path != "/proc/driver") {
				t.Errorf("%v: volume %+v", tt.values, v)
			}
		}
		if found != tt.want {
			t.Errorf("%v: /host/proc/driver mounted read-only: %v, want %v", tt.values, found, tt.want)
		}
	}
}

// make chart packages the chart with the version make image tags: the
// package's version is that version without its v (SemVer), its
// appVersion the tag, and the chart rendered from the package, with no
// values set, runs exactly the image make image builds.
func TestChartVersionIsImageTag(t *testing.T) {
	helmBin := os.Getenv("CDI_TEST_HELM")
	if helmBin == "" {
		t.Skip("CDI_TEST_HELM is not set: make test builds helm (test/k8s/build-tools.sh helm) and sets it")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("make is not on PATH: %v", err)
	}
	runMake := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", "../.."}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// The name make image gives the image, from its podman command.
	var image string
	for f := range strings.FieldsSeq(runMake("-n", "image")) {
		if rest, ok := strings.CutPrefix(f, "localhost/cdi-exec/plugins:"); ok && rest != "" {
			image = f
		}
	}
	if image == "" {
		t.Fatal("make -n image names no localhost/cdi-exec/plugins:<tag> image")
	}
	tag := strings.TrimPrefix(image, "localhost/cdi-exec/plugins:")
	if tag == "dev" {
		t.Fatalf("make image tags %s in a git checkout, not the version", image)
	}

	dir := t.TempDir()
	runMake("chart", "BIN="+dir, "CHART_HELM="+helmBin)
	pkgs, err := filepath.Glob(filepath.Join(dir, "cdi-exec-plugins-*.tgz"))
	if err != nil || len(pkgs) != 1 {
		t.Fatalf("make chart made %v (%v), want one package", pkgs, err)
	}
	meta, err := helm(t, "show", "chart", pkgs[0])
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimPrefix(tag, "v")
	for _, want := range []string{"\nversion: " + version + "\n", "\nappVersion: " + tag + "\n"} {
		if !strings.Contains("\n"+meta, want) {
			t.Errorf("the packaged chart lacks %q:\n%s", strings.TrimSpace(want), meta)
		}
	}
	if filepath.Base(pkgs[0]) != "cdi-exec-plugins-"+version+".tgz" {
		t.Errorf("the package is %s, want cdi-exec-plugins-%s.tgz", filepath.Base(pkgs[0]), version)
	}
	out, err := helm(t, "template", "cdi", pkgs[0], "--namespace", namespace)
	if err != nil {
		t.Fatal(err)
	}
	if got := container(t, loadRendered(t, out)).Image; got != image {
		t.Errorf("the packaged chart runs %s, want %s, the image make image builds", got, image)
	}
}

// configPaths are the paths the DaemonSet mounts the ConfigMap's plugin
// configs at, <type>.d/<name>.conf.
func configPaths(t *testing.T, objs []Object) []string {
	t.Helper()
	var paths []string
	for _, v := range find[*appsv1.DaemonSet](t, objs).Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			for _, it := range v.ConfigMap.Items {
				paths = append(paths, it.Path)
			}
		}
	}
	return paths
}
