//go:build e2enode

package k8se2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PodSpec is a one-container busybox pod on the host's network: the
// only kind of pod a node without CNI or a registry can run.
type PodSpec struct {
	Name   string
	Script string            // the container runs sh -c Script
	Limits map[string]string // resource limits, such as cdi-exec.io/tty: "2"
	// Always restarts the container when it exits; the default is Never.
	Always bool
	Labels map[string]string
	// ClaimTemplate, if set, gives the pod a claim from this
	// ResourceClaimTemplate (in the pod's namespace), which the container
	// uses.
	ClaimTemplate string
}

// Container is the name of the pod's container.
const Container = "c"

// Manifest is the pod as JSON, which both the kubelet's static pod files
// and the API server accept.
func (p PodSpec) Manifest() []byte {
	c := map[string]any{
		"name": Container, "image": Image, "imagePullPolicy": "Never",
		"command": []string{"/bin/sh", "-c", p.Script},
		// A failed container's status shows the end of its output.
		"terminationMessagePolicy": "FallbackToLogsOnError",
	}
	resources := map[string]any{}
	if len(p.Limits) > 0 {
		resources["limits"] = p.Limits
	}
	restart := "Never"
	if p.Always {
		restart = "Always"
	}
	spec := map[string]any{
		"hostNetwork": true, "restartPolicy": restart,
		"terminationGracePeriodSeconds": 1,
		"containers":                    []any{c},
	}
	if p.ClaimTemplate != "" {
		spec["resourceClaims"] = []any{map[string]any{"name": "claim", "resourceClaimTemplateName": p.ClaimTemplate}}
		resources["claims"] = []any{map[string]any{"name": "claim"}}
	}
	if len(resources) > 0 {
		c["resources"] = resources
	}
	meta := map[string]any{"name": p.Name, "namespace": "default"}
	if len(p.Labels) > 0 {
		meta["labels"] = p.Labels
	}
	pod := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
	data, _ := json.Marshal(pod)
	return data
}

// StaticName is what the kubelet calls the static pod from spec name.
func StaticName(name string) string { return name + "-" + NodeName }

// AddStaticPod writes p's manifest to the kubelet's static pod directory.
// It writes it beside the directory and renames it in: the kubelet reads
// every file there, a half-written or temporary one too.
func (n *Node) AddStaticPod(p PodSpec) {
	n.t.Helper()
	tmp := filepath.Join(filepath.Dir(n.kl.manifests), p.Name+".json")
	if err := os.WriteFile(tmp, p.Manifest(), 0o644); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(n.kl.manifests, p.Name+".json")); err != nil {
		n.t.Fatal(err)
	}
}

// RemoveStaticPod removes the static pod's manifest; the kubelet then
// stops the pod.
func (n *Node) RemoveStaticPod(name string) {
	n.t.Helper()
	if err := os.Remove(filepath.Join(n.kl.manifests, name+".json")); err != nil {
		n.t.Fatal(err)
	}
}

func (n *Node) url(path string) string {
	return fmt.Sprintf("https://127.0.0.1:%d%s", n.kl.port, path)
}

// Pods lists the kubelet's pods, with the static pods' status.
func (n *Node) Pods(ctx context.Context) (podList, error) {
	var l podList
	return l, n.api.getJSON(ctx, n.url("/pods"), &l)
}

// WaitPod waits until the kubelet's pod name (in namespace default)
// satisfies cond, which also sees a pod that does not exist (ok false).
func (n *Node) WaitPod(ctx context.Context, name string, cond func(p Pod, ok bool) error) (Pod, error) {
	var pod Pod
	err := waitFor(ctx, "pod "+name, func(ctx context.Context) error {
		l, err := n.Pods(ctx)
		if err != nil {
			return err
		}
		var ok bool
		pod, ok = l.find("default", name)
		return cond(pod, ok)
	}, n.Kubelet)
	return pod, err
}

// Logs returns a container's output, read through the kubelet's API.
func (n *Node) Logs(ctx context.Context, pod string) (string, error) {
	b, err := n.api.get(ctx, n.url("/containerLogs/default/"+pod+"/"+Container))
	return string(b), err
}

// WaitLogLine waits until container c of pod default/<pod> has printed a
// line that starts with prefix, and returns the last such line, trimmed.
func (n *Node) WaitLogLine(ctx context.Context, pod, c, prefix string) (string, error) {
	var line string
	err := waitFor(ctx, fmt.Sprintf("a %q line from %s/%s", prefix, pod, c), func(ctx context.Context) error {
		b, err := n.api.get(ctx, n.url("/containerLogs/default/"+pod+"/"+c))
		if err != nil {
			return err
		}
		for l := range strings.Lines(string(b)) {
			if strings.HasPrefix(l, prefix) {
				line = strings.TrimSpace(l)
			}
		}
		if line == "" {
			return fmt.Errorf("no %q line in %q", prefix, b)
		}
		return nil
	}, n.Kubelet)
	return line, err
}

// Metrics returns the kubelet's Prometheus metrics.
func (n *Node) Metrics(ctx context.Context) (string, error) {
	b, err := n.api.get(ctx, n.url("/metrics"))
	return string(b), err
}

// Running holds when the pod's container runs.
func Running(p Pod, ok bool) error {
	if !ok {
		return errors.New("no such pod")
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running != nil {
			return nil
		}
	}
	return fmt.Errorf("phase %s %s %s: containers %s", p.Status.Phase, p.Status.Reason, p.Status.Message, states(p))
}

// Ready holds when the pod's containers run and are ready (their
// readiness probes pass).
func Ready(p Pod, ok bool) error {
	if err := Running(p, ok); err != nil {
		return err
	}
	for _, c := range p.Status.ContainerStatuses {
		if !c.Ready {
			return fmt.Errorf("container %s runs, not ready", c.Name)
		}
	}
	return nil
}

// Succeeded holds when the pod ran to completion.
func Succeeded(p Pod, ok bool) error {
	if !ok {
		return errors.New("no such pod")
	}
	if p.Status.Phase == "Failed" {
		return fmt.Errorf("%w: the pod failed: %s", errGiveUp, states(p))
	}
	if p.Status.Phase != "Succeeded" {
		return fmt.Errorf("phase %s: containers %s", p.Status.Phase, states(p))
	}
	return nil
}

// Gone holds when the pod no longer exists.
func Gone(p Pod, ok bool) error {
	if ok {
		return fmt.Errorf("still there: phase %s", p.Status.Phase)
	}
	return nil
}

func states(p Pod) string {
	var s []string
	for _, c := range p.Status.ContainerStatuses {
		st := c.State
		switch {
		case st.Running != nil:
			s = append(s, c.Name+" running")
		case st.Waiting != nil:
			s = append(s, fmt.Sprintf("%s waiting %s %s", c.Name, st.Waiting.Reason, st.Waiting.Message))
		case st.Terminated != nil:
			s = append(s, fmt.Sprintf("%s terminated %d %s %s", c.Name, st.Terminated.ExitCode, st.Terminated.Reason, st.Terminated.Message))
		}
	}
	return strings.Join(s, "; ")
}

// KillContainer ends the pod's container with SIGKILL through the node's
// containerd, as a crash or the OOM killer would; the kubelet then starts
// it again as the pod's restartPolicy says, which injects its devices by
// their CDI names anew.
func (n *Node) KillContainer(ctx context.Context, p Pod) error {
	if len(p.Status.ContainerStatuses) == 0 {
		return fmt.Errorf("pod %s has no container", p.Metadata.Name)
	}
	c := p.Status.ContainerStatuses[0]
	_, id, ok := strings.Cut(c.ContainerID, "://")
	if !ok {
		return fmt.Errorf("pod %s: container %s has no id (%q)", p.Metadata.Name, c.Name, c.ContainerID)
	}
	_, err := n.ctrd.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
	return err
}

// RestartedFrom holds when the pod's container runs again, in another
// container than before's. While it does not, the error has the
// container's state: a restart the runtime refuses shows as waiting
// CreateContainerError with the runtime's message.
func RestartedFrom(before Pod) func(Pod, bool) error {
	return func(p Pod, ok bool) error {
		if !ok {
			return errors.New("no such pod")
		}
		if len(p.Status.ContainerStatuses) == 0 || len(before.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("phase %s: no container status", p.Status.Phase)
		}
		a, b := p.Status.ContainerStatuses[0], before.Status.ContainerStatuses[0]
		if a.ContainerID == b.ContainerID || a.State.Running == nil {
			return fmt.Errorf("not restarted from %s (restarts %d): now %s (restarts %d), %s", b.ContainerID, b.RestartCount, a.ContainerID, a.RestartCount, states(p))
		}
		return nil
	}
}

// WaitTaskGone waits until the node's containerd runs no task of the
// container (a ContainerStatus's containerID), as after the kubelet
// killed it.
func (n *Node) WaitTaskGone(ctx context.Context, containerID string) error {
	_, id, _ := strings.Cut(containerID, "://")
	return waitFor(ctx, "container "+id+" to end", func(ctx context.Context) error {
		out, err := n.ctrd.ctr(ctx, "tasks", "ls")
		if err != nil {
			return err
		}
		for l := range strings.Lines(out) {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == id && f[2] == "RUNNING" {
				return fmt.Errorf("its task runs: %s", strings.TrimSpace(l))
			}
		}
		return nil
	}, n.Kubelet)
}
