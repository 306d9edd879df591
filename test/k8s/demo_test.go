//go:build e2enode

package k8se2e

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestDemoK8s is make demo-k8s: a one-node cluster of this machine (the
// real-node tools, as e2e-cluster starts them), the image built and
// imported into the node's containerd, the chart installed with helm, and
// the tty examples of deploy/example/ applied; for each pod it prints what
// it asked for and which devices it got, then uninstalls and tears the
// cluster down. The GPU examples are not applied: this node's GPUs, if
// any, are not the dgx-h100 fixture host's they select
// (internal/kubelet/dra's TestExampleGPUClaims runs them against it).
// With CDI_DEMO_KEEP=1 (make demo-k8s KEEP=1) it prints the KUBECONFIG
// and keeps the cluster up until interrupted (Ctrl-C), then tears it down
// all the same: nothing is left on the machine.
func TestDemoK8s(t *testing.T) {
	start := time.Now()
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	ctx, d := newDRARun(t, 20*time.Minute, "helm")
	c := d.c
	h := newHelmRun(t, d)
	version, err := c.Kubectl(ctx, "get", "nodes", "-o", "jsonpath={.items[0].status.nodeInfo.kubeletVersion}")
	if err != nil {
		t.Fatal(err)
	}
	say("== A one-node cluster of this machine (Kubernetes %s), up in %.0fs; its files are under %s", strings.TrimSpace(version), time.Since(start).Seconds(), c.Dir)

	d.loadImage(ctx, t)
	say("== make image, imported into the node's containerd (%.0fs)", time.Since(start).Seconds())
	// kvm, fuse and tun, the generic plugin's shared types, where this
	// machine has the devices.
	generic := sandboxDevices()
	var enable []string
	for _, typ := range generic {
		enable = append(enable, "--set", "types."+typ+".enabled=true")
	}
	h.helm(ctx, t, h.values("install", append([]string{"--create-namespace"}, enable...)...)...)
	driverPod := d.waitDriver(ctx, t, "")
	slice := d.waitSlice(ctx, t)
	h.waitReady(ctx, t, driverPod)
	say("== helm install cdi deploy/helm/cdi-exec-plugins -n %s: driver pod %s ready; the node publishes %d ttys (%s..%s), %.0fs",
		draNamespace, driverPod, len(slice), slice[0], slice[len(slice)-1], time.Since(start).Seconds())

	objs, pods := d.demoObjects(t, len(generic) == 3)
	d.apply(ctx, t, objs)
	if len(generic) == 3 {
		say("== kubectl apply -f deploy/example/ (the tty examples and the sandbox's kvm, fuse and tun; %s)", strings.Join(pods, ", "))
	} else {
		say("== kubectl apply -f deploy/example/ (the tty examples; %s); no sandbox: this machine lacks some of /dev/kvm, /dev/fuse, /dev/net/tun", strings.Join(pods, ", "))
	}
	for _, name := range pods {
		if _, err := c.WaitPod(ctx, "default", name, Running); err != nil {
			t.Fatal(err)
		}
		var p corev1.Pod
		if err := c.Get(ctx, "/api/v1/namespaces/default/pods/"+name, &p); err != nil {
			t.Fatal(err)
		}
		say("pod %s", name)
		say("  asked for: %s", d.askedFor(ctx, t, &p))
		say("  got:       %s", d.got(ctx, t, &p))
		for _, ctr := range p.Spec.Containers {
			say("  container %s sees: %s", ctr.Name, d.sees(ctx, t, name, ctr.Name))
		}
	}
	say("== %.0fs from the start", time.Since(start).Seconds())

	if os.Getenv("CDI_DEMO_KEEP") == "1" {
		say("\nThe cluster stays up (KEEP=1). In another shell:\n\n  export KUBECONFIG=%s\n  kubectl get pods -A\n  kubectl get resourceclaims,resourceslices\n\nCtrl-C tears it all down.", c.Kubeconfig)
		sig, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		<-sig.Done()
		stop()
		say("\nTearing down.")
		ctx = t.Context()
	}

	for _, name := range pods {
		if _, err := c.Kubectl(ctx, "delete", "pod", name, "--wait=false"); err != nil {
			t.Fatal(err)
		}
	}
	h.helm(ctx, t, "uninstall", "cdi", "--namespace", draNamespace, "--wait", "--timeout", "2m")
	h.checkGone(ctx, t)
	say("== helm uninstall: nothing of the release is left; the cluster goes next (%.0fs in all)", time.Since(start).Seconds())
}

// demoObjects are the tty examples of deploy/example/ for this node: the
// DRA ones (not the device-plugin mode's, not the GPU ones), their pods
// on the node's network with the node's local busybox image (the node
// pulls nothing), and the names of the pods.
func (d *draRun) demoObjects(t *testing.T, sandbox bool) ([]runtime.Object, []string) {
	t.Helper()
	var out []runtime.Object
	var pods []string
	for _, o := range deployObjects(t, "example") {
		base := filepath.Base(o.File)
		if strings.Contains(base, "device-plugin") || strings.HasPrefix(base, "gpu") || base == "sandbox.yaml" && !sandbox {
			continue
		}
		if pod, ok := o.Obj.(*corev1.Pod); ok {
			pod.Spec.HostNetwork = true
			pod.Spec.TerminationGracePeriodSeconds = new(int64)
			for i := range pod.Spec.Containers {
				ctr := &pod.Spec.Containers[i]
				ctr.Image, ctr.ImagePullPolicy = Image, corev1.PullNever
				ctr.Command = []string{"/bin/sh", "-c", devLoop}
				if base == "sandbox.yaml" {
					ctr.Command = []string{"/bin/sh", "-c", `while :; do echo "devs $(stat -c '%n=%t:%T' /dev/kvm /dev/fuse /dev/net/tun | tr '\n' ' ')"; sleep 1; done`}
				}
			}
			pods = append(pods, pod.Name)
		}
		out = append(out, o.Obj)
	}
	if len(pods) == 0 {
		t.Fatal("deploy/example/ has no tty example pod")
	}
	return out, pods
}

// askedFor says what the pod asked for: its claims' requests (from the
// claim or the template), and extended resources in its limits.
func (d *draRun) askedFor(ctx context.Context, t *testing.T, p *corev1.Pod) string {
	t.Helper()
	var asks []string
	for _, rc := range p.Spec.ResourceClaims {
		var spec resourceapi.ResourceClaimSpec
		what := ""
		switch {
		case rc.ResourceClaimTemplateName != nil:
			var tmpl resourceapi.ResourceClaimTemplate
			if err := d.c.Get(ctx, "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates/"+*rc.ResourceClaimTemplateName, &tmpl); err != nil {
				t.Fatal(err)
			}
			spec, what = tmpl.Spec.Spec, "a claim from the template "+tmpl.Name
		case rc.ResourceClaimName != nil:
			var claim resourceapi.ResourceClaim
			if err := d.c.Get(ctx, "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/"+*rc.ResourceClaimName, &claim); err != nil {
				t.Fatal(err)
			}
			spec, what = claim.Spec, "the claim "+claim.Name
		}
		for _, r := range spec.Devices.Requests {
			if r.Exactly != nil {
				what += fmt.Sprintf(", request %s: %d of %s", r.Name, max(r.Exactly.Count, 1), r.Exactly.DeviceClassName)
			}
		}
		asks = append(asks, what)
	}
	for _, ctr := range p.Spec.Containers {
		for name, q := range ctr.Resources.Limits {
			if strings.Contains(string(name), "/") {
				asks = append(asks, fmt.Sprintf("container %s: limits %s: %s", ctr.Name, name, q.String()))
			}
		}
	}
	return strings.Join(asks, "; ")
}

// got says which devices the pod's claims were allocated, by claim.
func (d *draRun) got(ctx context.Context, t *testing.T, p *corev1.Pod) string {
	t.Helper()
	var names []string
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			names = append(names, *s.ResourceClaimName)
		}
	}
	if s := p.Status.ExtendedResourceClaimStatus; s != nil {
		names = append(names, s.ResourceClaimName)
	}
	for _, rc := range p.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil && !slices.Contains(names, *rc.ResourceClaimName) {
			names = append(names, *rc.ResourceClaimName)
		}
	}
	var out []string
	for _, name := range names {
		var claim resourceapi.ResourceClaim
		if err := d.c.Get(ctx, "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/"+name, &claim); err != nil {
			t.Fatal(err)
		}
		if claim.Status.Allocation == nil {
			t.Fatalf("claim %s of pod %s is not allocated", name, p.Name)
		}
		var devs []string
		for _, r := range claim.Status.Allocation.Devices.Results {
			devs = append(devs, r.Driver+"/"+r.Device)
		}
		out = append(out, fmt.Sprintf("claim %s: %s", name, strings.Join(devs, " ")))
	}
	return strings.Join(out, "; ")
}

// sees is the container's last line of the devices it sees.
func (d *draRun) sees(ctx context.Context, t *testing.T, pod, container string) string {
	t.Helper()
	var line string
	err := waitFor(ctx, "the output of "+pod+"/"+container, func(ctx context.Context) error {
		// Through the kubelet's API: kubectl logs would need the node's
		// name to resolve.
		b, err := d.c.Node.api.get(ctx, d.c.Node.url("/containerLogs/default/"+pod+"/"+container))
		if err != nil {
			return err
		}
		out := string(b)
		for l := range strings.Lines(out) {
			if strings.HasPrefix(l, "devs") {
				line = strings.TrimSpace(strings.TrimPrefix(l, "devs"))
			}
		}
		if line == "" {
			return fmt.Errorf("no devs line yet in %q", out)
		}
		return nil
	}, d.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// sandboxDevices returns the generic types of the sandbox example whose
// device this machine has: kvm, fuse and tun when all are there.
func sandboxDevices() []string {
	var out []string
	for typ, path := range map[string]string{"kvm": "/dev/kvm", "fuse": "/dev/fuse", "tun": "/dev/net/tun"} {
		if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			out = append(out, typ)
		}
	}
	slices.Sort(out)
	return out
}
