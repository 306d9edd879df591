package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/cdi-exec/plugins/pkg/protocol"
)

const (
	deploy    = "../../deploy"
	namespace = "cdi-exec"
)

// kinds returns "file: Kind name" for each object, in order.
func kinds(t *testing.T, objs []Object) []string {
	var out []string
	for _, o := range objs {
		m, err := meta.Accessor(o.Obj)
		if err != nil {
			t.Fatal(err)
		}
		kind := fmt.Sprintf("%T", o.Obj)
		kind = kind[strings.LastIndex(kind, ".")+1:]
		out = append(out, filepath.Base(o.File)+": "+kind+" "+m.GetName())
	}
	return out
}

func loadDir(t *testing.T, dir string) []Object {
	t.Helper()
	files, err := Files(filepath.Join(deploy, dir))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Load(files...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestDecode reads every manifest strictly as the k8s.io/api type it
// names.
func TestDecode(t *testing.T) {
	tests := []struct {
		dir  string
		want []string
	}{
		// In the order kubectl apply -f deploy/ creates them: the
		// namespace before what lives in it.
		{".", []string{
			"00-namespace.yaml: Namespace cdi-exec",
			"10-rbac.yaml: ServiceAccount cdi-dra",
			"10-rbac.yaml: ClusterRole cdi-dra",
			"10-rbac.yaml: ClusterRoleBinding cdi-dra",
			"20-configmap.yaml: ConfigMap cdi-plugin-configs",
			"30-daemonset.yaml: DaemonSet cdi-dra",
			"40-deviceclasses.yaml: DeviceClass gpu.cdi-exec.io",
			"40-deviceclasses.yaml: DeviceClass tty.cdi-exec.io",
			"50-admissionpolicy.yaml: ValidatingAdmissionPolicy cdi-resourceslices",
			"50-admissionpolicy.yaml: ValidatingAdmissionPolicy cdi-claimstatus",
			"50-admissionpolicy.yaml: ValidatingAdmissionPolicyBinding cdi-resourceslices",
			"50-admissionpolicy.yaml: ValidatingAdmissionPolicyBinding cdi-claimstatus",
		}},
		{"device-plugin", []string{"daemonset.yaml: DaemonSet cdi-device-plugin"}},
		{"example", []string{
			"gpus.yaml: ResourceClaimTemplate gpu-numa1",
			"gpus.yaml: ResourceClaimTemplate gpu-pcie-root",
			"gpus.yaml: ResourceClaimTemplate gpu-pcie-switch",
			"gpus.yaml: ResourceClaimTemplate two-gpus-one-switch",
			"gpus.yaml: ResourceClaimTemplate gpu-render-only",
			"gpus.yaml: Pod gpu-numa1",
			"gpus.yaml: Pod gpu-pcie-root",
			"gpus.yaml: Pod gpu-pcie-switch",
			"gpus.yaml: Pod two-gpus-one-switch",
			"gpus.yaml: Pod gpu-render-only",
			"sandbox.yaml: ResourceClaimTemplate kvm-fuse-tun",
			"sandbox.yaml: Pod sandbox",
			"tty-limits.yaml: Pod tty-limits",
			"tty-shared.yaml: ResourceClaim one-tty",
			"tty-shared.yaml: Pod tty-shared",
			"two-ttys-device-plugin.yaml: Pod two-ttys-dp",
			"two-ttys.yaml: ResourceClaimTemplate two-ttys",
			"two-ttys.yaml: Pod two-ttys",
		}},
	}
	for _, tt := range tests {
		if got := kinds(t, loadDir(t, tt.dir)); !slices.Equal(got, tt.want) {
			t.Errorf("deploy/%s:\n got %q\nwant %q", tt.dir, got, tt.want)
		}
	}
}

// TestStrict checks that the reader refuses what the API server would
// refuse or silently drop.
func TestStrict(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\nspek: {}\n",
		"unknown kind":  "apiVersion: v1\nkind: Nope\nmetadata: {name: x}\n",
		"duplicate":     "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\nmetadata: {name: y}\n",
		"wrong version": "apiVersion: resource.k8s.io/v9\nkind: DeviceClass\nmetadata: {name: x}\n",
	} {
		path := filepath.Join(t.TempDir(), "m.yaml")
		if err := writeFile(path, doc); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// findAll returns the objects of type T in objs.
func findAll[T any](objs []Object) []T {
	var found []T
	for _, o := range objs {
		if v, ok := o.Obj.(T); ok {
			found = append(found, v)
		}
	}
	return found
}

// find returns the one object of type T in objs.
func find[T any](t *testing.T, objs []Object) T {
	t.Helper()
	found := findAll[T](objs)
	if len(found) != 1 {
		t.Fatalf("%d objects of type %T, want one", len(found), *new(T))
	}
	return found[0]
}

// TestDRADeployment checks that the DRA deployment hangs together: the
// namespace, the service account and its least rights, the mounts, the
// configs (valid plugin configs, one DeviceClass per type).
func TestDRADeployment(t *testing.T) {
	objs := loadDir(t, ".")
	for _, o := range objs {
		m, _ := meta.Accessor(o.Obj)
		if _, cluster := o.Obj.(*corev1.Namespace); !cluster && m.GetNamespace() != "" && m.GetNamespace() != namespace {
			t.Errorf("%s %s is in namespace %q", o.File, m.GetName(), m.GetNamespace())
		}
	}
	if ns := find[*corev1.Namespace](t, objs); ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %s has the labels %v, want its Pod Security level (privileged: host paths)", ns.Name, ns.Labels)
	}
	ds := find[*appsv1.DaemonSet](t, objs)
	sa := find[*corev1.ServiceAccount](t, objs)
	pod := ds.Spec.Template.Spec
	checkHardened(t, pod)
	if pod.ServiceAccountName != sa.Name {
		t.Errorf("the DaemonSet runs as %q, the ServiceAccount is %q", pod.ServiceAccountName, sa.Name)
	}
	c := pod.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "dra" || !slices.Contains(c.Args, "--node-name=$(NODE_NAME)") {
		t.Errorf("args %q", c.Args)
	}
	checkMounts(t, pod, map[string]string{
		"/host/sys": "/sys", "/host/dev": "/dev", "/var/lib/cdi": "/var/lib/cdi",
		"/var/lib/cdi-kubelet-plugin": "/var/lib/cdi-kubelet-plugin", "/var/run/cdi": "/var/run/cdi",
		"/var/lib/kubelet/plugins/tty.cdi-exec.io": "/var/lib/kubelet/plugins/tty.cdi-exec.io",
		"/var/lib/kubelet/plugins/gpu.cdi-exec.io": "/var/lib/kubelet/plugins/gpu.cdi-exec.io",
		"/var/lib/kubelet/plugins_registry":        "/var/lib/kubelet/plugins_registry",
	}, "/host/sys", "/host/dev")
	// Not the whole plugins directory, with other drivers' sockets.
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/var/lib/kubelet/plugins" || m.MountPath == "/var/lib/kubelet" {
			t.Errorf("%s is mounted whole", m.MountPath)
		}
	}

	crb := find[*rbacv1.ClusterRoleBinding](t, objs)
	cr := find[*rbacv1.ClusterRole](t, objs)
	if crb.RoleRef.Name != cr.Name || len(crb.Subjects) != 1 || crb.Subjects[0].Name != sa.Name || crb.Subjects[0].Namespace != namespace {
		t.Errorf("binding %+v does not bind %s to %s/%s", crb, cr.Name, namespace, sa.Name)
	}
	var rules []string
	for _, r := range cr.Rules {
		rules = append(rules, fmt.Sprintf("%v %v %v", r.APIGroups, r.Resources, r.Verbs))
	}
	want := []string{
		"[resource.k8s.io] [resourceslices] [list watch create update delete]",
		"[resource.k8s.io] [resourceclaims/status] [patch]",
		"[resource.k8s.io] [resourceclaims/driver] [associated-node:patch associated-node:update]",
		// By name only: a node's driver never lists or watches claims.
		"[resource.k8s.io] [resourceclaims] [get]",
		"[] [nodes] [get]",
		"[events.k8s.io] [events] [create patch]",
	}
	if !slices.Equal(rules, want) {
		t.Errorf("rules %q, want the least the driver needs %q", rules, want)
	}

	types := checkConfigs(t, find[*corev1.ConfigMap](t, objs), pod)
	var classes []string
	for _, o := range objs {
		if dc, ok := o.Obj.(*resourceapi.DeviceClass); ok {
			classes = append(classes, dc.Name)
			if len(dc.Spec.Selectors) != 1 || dc.Spec.Selectors[0].CEL.Expression != fmt.Sprintf("device.driver == %q", dc.Name) {
				t.Errorf("DeviceClass %s selects %+v", dc.Name, dc.Spec.Selectors)
			}
			// Extended resources through DRA: cdi-exec.io/<type>.
			typ, _, _ := strings.Cut(dc.Name, ".")
			if want := "cdi-exec.io/" + typ; dc.Spec.ExtendedResourceName == nil || *dc.Spec.ExtendedResourceName != want {
				t.Errorf("DeviceClass %s has extendedResourceName %v, want %s", dc.Name, dc.Spec.ExtendedResourceName, want)
			}
		}
	}
	for _, typ := range types {
		if !slices.Contains(classes, typ+".cdi-exec.io") {
			t.Errorf("no DeviceClass for the driver of type %s", typ)
		}
	}
}

// checkHardened checks the pod's confinement: the runtime's seccomp
// profile, no capabilities, no privilege escalation, a read-only root and
// a memory limit.
func checkHardened(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	if sc := pod.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v, want seccompProfile RuntimeDefault", pod.SecurityContext)
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 || sc.Privileged != nil && *sc.Privileged {
		t.Errorf("container security context %+v", sc)
	}
	if m := c.Resources.Limits.Memory(); m.IsZero() {
		t.Errorf("no memory limit: %+v", c.Resources)
	}
}

// checkMounts checks that every mount at a path in want comes from that
// host path, and that those in ro are read-only.
func checkMounts(t *testing.T, pod corev1.PodSpec, want map[string]string, ro ...string) {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	seen := map[string]bool{}
	for _, m := range pod.Containers[0].VolumeMounts {
		host, ok := want[m.MountPath]
		if !ok {
			continue
		}
		seen[m.MountPath] = true
		v := vols[m.Name]
		if v.HostPath == nil || v.HostPath.Path != host {
			t.Errorf("%s is mounted from %+v, want the host's %s", m.MountPath, v.VolumeSource, host)
		}
		if slices.Contains(ro, m.MountPath) != m.ReadOnly {
			t.Errorf("%s: readOnly %v", m.MountPath, m.ReadOnly)
		}
	}
	for path := range want {
		if !seen[path] {
			t.Errorf("nothing is mounted at %s", path)
		}
	}
}

// checkConfigs checks that the configs volume of pod mounts each key of
// the ConfigMap as /etc/cdi/<type>.d/<name>.conf and that each is a
// plugin config of that type, and returns the types.
func checkConfigs(t *testing.T, cm *corev1.ConfigMap, pod corev1.PodSpec) []string {
	t.Helper()
	var types []string
	for _, v := range pod.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		if v.ConfigMap.Name != cm.Name || len(v.ConfigMap.Items) != len(cm.Data) {
			t.Fatalf("volume %s mounts %+v, not every key of %s", v.Name, v.ConfigMap, cm.Name)
		}
		for _, it := range v.ConfigMap.Items {
			conf, err := protocol.ParseConfig([]byte(cm.Data[it.Key]))
			if err != nil {
				t.Fatalf("%s: %v", it.Key, err)
			}
			if dir := filepath.Dir(it.Path); dir != conf.Type+".d" || filepath.Ext(it.Path) != ".conf" {
				t.Errorf("%s of type %s is mounted as %s", it.Key, conf.Type, it.Path)
			}
			types = append(types, conf.Type)
		}
	}
	if len(types) == 0 {
		t.Fatal("no configs mounted")
	}
	return types
}

// TestDevicePluginDeployment checks the device-plugin variant: it runs
// that mode in the same image with the same configs, and gets no token.
func TestDevicePluginDeployment(t *testing.T) {
	base := loadDir(t, ".")
	ds := find[*appsv1.DaemonSet](t, loadDir(t, "device-plugin"))
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	if ds.Namespace != namespace || len(c.Args) == 0 || c.Args[0] != "device-plugin" {
		t.Errorf("%s/%s runs %q", ds.Namespace, ds.Name, c.Args)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the device-plugin mode needs no API token, and should not get one")
	}
	if dra := find[*appsv1.DaemonSet](t, base).Spec.Template.Spec.Containers[0]; c.Image != dra.Image {
		t.Errorf("image %s, the DRA DaemonSet runs %s", c.Image, dra.Image)
	}
	checkHardened(t, pod)
	checkMounts(t, pod, map[string]string{
		"/host/sys": "/sys", "/host/dev": "/dev", "/var/lib/cdi": "/var/lib/cdi", "/var/run/cdi": "/var/run/cdi",
		"/var/lib/kubelet/device-plugins": "/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources": "/var/lib/kubelet/pod-resources",
	}, "/host/sys", "/host/dev")
	checkConfigs(t, find[*corev1.ConfigMap](t, base), pod)
}

// TestExample checks that the example pod's claim comes from the
// template, which asks for two devices of a DeviceClass of deploy/.
func TestExample(t *testing.T) {
	objs := slices.DeleteFunc(loadDir(t, "example"), func(o Object) bool { return filepath.Base(o.File) != "two-ttys.yaml" })
	tmpl := find[*resourceapi.ResourceClaimTemplate](t, objs)
	reqs := tmpl.Spec.Spec.Devices.Requests
	if len(reqs) != 1 || reqs[0].Exactly == nil || reqs[0].Exactly.Count != 2 || reqs[0].Exactly.DeviceClassName != "tty.cdi-exec.io" {
		t.Fatalf("template requests %+v", reqs)
	}
	for _, o := range objs {
		pod, ok := o.Obj.(*corev1.Pod)
		if !ok || len(pod.Spec.ResourceClaims) == 0 {
			continue
		}
		rc := pod.Spec.ResourceClaims[0]
		if rc.ResourceClaimTemplateName == nil || *rc.ResourceClaimTemplateName != tmpl.Name {
			t.Errorf("pod %s claims %+v", pod.Name, rc)
		}
		if c := pod.Spec.Containers[0].Resources.Claims; len(c) != 1 || c[0].Name != rc.Name {
			t.Errorf("pod %s's container uses the claims %+v", pod.Name, c)
		}
	}
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }
