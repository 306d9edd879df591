//go:build e2enode

package k8se2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The device-plugin mode's GC settings in this test: a removed pod's ttys are freed
// once it has been absent from two scans and for the grace period, so
// within gcGrace + 2*gcInterval plus the pod's termination.
const (
	gcInterval = 2 * time.Second
	gcGrace    = 10 * time.Second
	resource   = "cdi-exec.io/tty"
)

// TestNodeDevicePluginTTYs runs cdi-kubelet-plugin's device-plugin mode
// against the real kubelet with generic-tty on this machine's real
// virtual consoles (those well above any in use), with a private state
// dir and CDI spec dir:
//   - a static pod asking for cdi-exec.io/tty: 2 runs and sees exactly the
//     two ttys the kubelet allocated, which are the two the plugin holds
//     and the two the CDI spec names;
//   - a kubelet restart leaves the pod running with the same allocation,
//     and the device-plugin mode registers with the new kubelet;
//   - the device-plugin mode killed (SIGKILL, as a force-deleted pod's
//     container is) while the spec dir is emptied, and started again,
//     puts the pod's spec file back; the pod's container, killed then,
//     runs again within restartBound with the same ttys (without the
//     file the runtime refuses it: "unresolvable CDI devices");
//   - the spec file deleted by hand while the mode runs is back within
//     specFileBound;
//   - removing the pod frees its ttys within the GC bound, and the spec
//     file is gone;
//   - SIGTERM stops the device-plugin mode cleanly and removes its socket.
func TestNodeDevicePluginTTYs(t *testing.T) {
	bin := repoBin(t)
	binary := filepath.Join(bin, "cdi-kubelet-plugin")
	if _, err := os.Stat(binary); err != nil {
		t.Fatalf("%s is not built (make e2e-node builds it): %v", binary, err)
	}
	reserved := ttyReserve(t)
	n := StartNode(t)
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	b := startDevicePlugin(t, n, bin, reserved)

	all := b.waitRegistered(ctx, t, time.Now())
	t.Logf("the kubelet lists %d devices for %s: %v", len(all), resource, all)

	n.AddStaticPod(PodSpec{Name: "ttys", Limits: map[string]string{resource: "2"}, Script: devLoop, Always: true})
	pod, err := n.WaitPod(ctx, StaticName("ttys"), Running)
	if err != nil {
		t.Fatal(err)
	}
	held, id := b.checkPodTTYs(ctx, t, pod)

	// A kubelet restart: the pod keeps running with the same devices, and
	// the device-plugin mode registers with the new kubelet.
	n.StopKubelet()
	if err := n.StartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	b.waitRegistered(ctx, t, time.Now())
	after, err := n.WaitPod(ctx, StaticName("ttys"), Running)
	if err != nil {
		t.Fatal(err)
	}
	sameContainer(t, "the kubelet restart", pod, after)
	if again, againID := b.checkPodTTYs(ctx, t, after); !slices.Equal(again, held) || againID != id {
		t.Fatalf("after the kubelet restart the pod has %v for %s, had %v for %s", again, againID, held, id)
	}

	// The device-plugin mode killed while the spec dir is emptied, and
	// started again: it puts the pod's spec file back, and the pod's
	// container, killed then, runs again with its ttys.
	b.d.kill()
	start := time.Now()
	wiped, err := emptyDir(n.CDIDir)
	if err != nil {
		t.Fatal(err)
	}
	b.start()
	took := waitFiles(ctx, t, n.CDIDir, wiped, start, time.Minute, b.d)
	t.Logf("spec dir emptied (%v) with the device-plugin mode killed; the new process put them back %.1fs later", wiped, took.Seconds())
	b.killAndRestart(ctx, t, after, held, id)

	// A spec file deleted by hand while the mode runs is back at once.
	deleteSpecFiles(ctx, t, n.CDIDir, wiped, b.d)

	// Removing the pod frees its ttys within the GC bound.
	removed := time.Now()
	n.RemoveStaticPod("ttys")
	if _, err := n.WaitPod(ctx, StaticName("ttys"), Gone); err != nil {
		t.Fatal(err)
	}
	b.waitFreed(ctx, t, removed, held)

	b.stop(t)
}

// killAndRestart kills the static pod's container and checks that it
// runs again within restartBound, seeing the ttys it held, still held
// under id.
func (b *pluginRun) killAndRestart(ctx context.Context, t *testing.T, pod Pod, held []string, id string) {
	t.Helper()
	start := time.Now()
	if err := b.n.KillContainer(ctx, pod); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, restartBound)
	defer cancel()
	after, err := b.n.WaitPod(wctx, pod.Metadata.Name, RestartedFrom(pod))
	if err != nil {
		t.Fatalf("the pod's container, killed, did not run again within %v: %v", restartBound, err)
	}
	took := time.Since(start)
	b.logLen = 0 // the new container's output
	if again, againID := b.checkPodTTYs(ctx, t, after); !slices.Equal(again, held) || againID != id {
		t.Fatalf("after its restart the pod has %v for %s, had %v for %s", again, againID, held, id)
	}
	t.Logf("the container, killed, ran again %.1fs later (restarts %d) with %v", took.Seconds(), after.Status.ContainerStatuses[0].RestartCount, held)
}

// waitFreed waits, within the GC bound, until the plugin holds nothing
// and the CDI spec file is gone.
func (b *pluginRun) waitFreed(ctx context.Context, t *testing.T, removed time.Time, held []string) {
	t.Helper()
	bound := gcGrace + 2*gcInterval + 20*time.Second
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	err := waitFor(ctx, "the device-plugin mode to free the removed pod's ttys", func(ctx context.Context) error {
		if l := b.allocations(ctx, t); len(l) > 0 {
			return fmt.Errorf("still held: %+v", l)
		}
		if specs := b.specs(t); len(specs) > 0 {
			return fmt.Errorf("spec files left: %v", specs)
		}
		return nil
	}, b.d, b.n.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("freed %v %.1fs after the manifest was removed (bound %v)", held, time.Since(removed).Seconds(), bound)
}

// devLoop prints the container's tty device nodes with their numbers
// every second: "devs /dev/tty45=4:2d /dev/tty46=4:2e".
const devLoop = `while :; do echo "devs $(stat -c '%n=%t:%T' /dev/tty[0-9]* 2>/dev/null | tr '\n' ' ')"; sleep 1; done`

// pluginRun is one cdi-kubelet-plugin device-plugin run on a node.
type pluginRun struct {
	n      *Node
	d      *daemon
	bin    string
	conf   string
	state  string
	socket string // the kubelet's device-plugin dir
	logLen int    // how much of the pod's output has been read
}

func startDevicePlugin(t *testing.T, n *Node, bin string, reserved int) *pluginRun {
	b := &pluginRun{n: n, bin: bin, conf: filepath.Join(n.Dir, "cdi-conf"), state: filepath.Join(n.Dir, "cdi-state"),
		socket: filepath.Join(kubeletDir, "device-plugins")}
	conf := fmt.Sprintf(`{"cdiVersion": "0.0.2", "name": "ttys", "type": "tty", "plugin": "generic-tty", "args": {"num_system_reserved": %d}}`, reserved)
	for _, d := range []string{filepath.Join(b.conf, "tty.d"), b.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(b.conf, "tty.d", "generic-tty.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	b.start()
	return b
}

// start starts the device-plugin mode (again, after it was killed).
func (b *pluginRun) start() {
	b.d = b.n.Spawn("cdi-kubelet-plugin", filepath.Join(b.bin, "cdi-kubelet-plugin"), []string{
		"device-plugin", "--conf-dir", b.conf, "--type", "tty", "--resource-prefix", "cdi-exec.io",
		"--kubelet-dir", kubeletDir, "--cdi-spec-dir", b.n.CDIDir,
		"--gc-interval", gcInterval.String(), "--gc-grace", gcGrace.String(),
		"--claim-state-dir", filepath.Join(filepath.Dir(b.state), "dra-state"),
	}, b.env())
}

func (b *pluginRun) env() []string {
	return []string{"CDI_PATH=" + b.bin, "CDI_STATE_DIR=" + b.state, "CDI_HOST_ROOT=/", "CDI_CONF_DIR=" + b.conf}
}

// waitRegistered waits until the kubelet started at since counts a
// registration of the resource and has its devices, and returns them.
func (b *pluginRun) waitRegistered(ctx context.Context, t *testing.T, since time.Time) []string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^kubelet_device_plugin_registration_total\{resource_name="` + regexp.QuoteMeta(resource) + `"\} (\d+)`)
	var devs []string
	err := waitFor(ctx, "the device-plugin mode to register "+resource, func(ctx context.Context) error {
		m, err := b.n.Metrics(ctx)
		if err != nil {
			return err
		}
		if c := re.FindStringSubmatch(m); c == nil || c[1] == "0" {
			return errors.New("not registered")
		}
		devs = b.checkpoint(t).Data.RegisteredDevices[resource]
		if len(devs) < 2 {
			return fmt.Errorf("registered with devices %v", devs)
		}
		return nil
	}, b.d, b.n.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("registered with the kubelet %.1fs after it answered", time.Since(since).Seconds())
	slices.Sort(devs)
	return devs
}

// checkpoint is the kubelet's device manager checkpoint.
type checkpoint struct {
	Data struct {
		PodDeviceEntries []struct {
			PodUID, ContainerName, ResourceName string
			DeviceIDs                           map[string][]string
		}
		RegisteredDevices map[string][]string
	}
}

func (b *pluginRun) checkpoint(t *testing.T) checkpoint {
	var c checkpoint
	data, err := os.ReadFile(filepath.Join(b.socket, "kubelet_internal_checkpoint"))
	if err == nil {
		err = json.Unmarshal(data, &c)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the kubelet's checkpoint: %v", err)
	}
	return c
}

// kubeletDevices returns the device ids the kubelet allocated to the pod.
func (b *pluginRun) kubeletDevices(t *testing.T, uid string) []string {
	var ids []string
	for _, e := range b.checkpoint(t).Data.PodDeviceEntries {
		if e.PodUID == uid && e.ResourceName == resource {
			for _, numa := range e.DeviceIDs {
				ids = append(ids, numa...)
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// allocation is one entry of cdictl ls.
type allocation struct {
	RequestID  string   `json:"requestId"`
	Devices    []string `json:"devices"`
	DeviceKeys []string `json:"deviceKeys"`
}

// allocations lists what the plugins hold in the plugin's state dir.
func (b *pluginRun) allocations(ctx context.Context, t *testing.T) []allocation {
	out, err := run(ctx, b.env(), filepath.Join(b.bin, "cdictl"), "ls", "-o", "json", "--state-dir", b.state)
	if err != nil {
		t.Fatal(err)
	}
	var l struct{ Allocations []allocation }
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("cdictl ls: %v\n%s", err, out)
	}
	return l.Allocations
}

// specs returns the distinct device node paths of each CDI spec file in
// the node's spec dir (the request's own device and each device's entry
// name the same nodes), leaving out the kubelet plugin helper's specs of
// device metadata (<driver>_metadata_<claim UID>_<request>.json), which
// mount files and name no nodes.
func (b *pluginRun) specs(t *testing.T) map[string][]string {
	files, _ := filepath.Glob(filepath.Join(b.n.CDIDir, "*"))
	out := map[string][]string{}
	for _, f := range files {
		if strings.Contains(filepath.Base(f), "_metadata_") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var spec struct {
			Devices []struct {
				ContainerEdits struct{ DeviceNodes []struct{ Path string } }
			}
		}
		if err := json.Unmarshal(data, &spec); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[f] = []string{}
		for _, d := range spec.Devices {
			for _, node := range d.ContainerEdits.DeviceNodes {
				out[f] = append(out[f], node.Path)
			}
		}
		slices.Sort(out[f])
		out[f] = slices.Compact(out[f])
	}
	return out
}

// sameContainer fails unless the pod's container after an event is the one
// it had before, never restarted.
func sameContainer(t *testing.T, event string, before, after Pod) {
	t.Helper()
	if a, p := after.Status.ContainerStatuses[0], before.Status.ContainerStatuses[0]; a.ContainerID != p.ContainerID || a.RestartCount != 0 {
		t.Fatalf("after %s the container is %s (restarts %d), was %s", event, a.ContainerID, a.RestartCount, p.ContainerID)
	}
}

// podTTYs returns the ttys the pod printed last (in output printed since
// the last check), sorted, after checking that each has the host's device
// numbers, and the line it printed them in.
func (b *pluginRun) podTTYs(ctx context.Context, t *testing.T, pod Pod) ([]string, string) {
	t.Helper()
	line := b.lastDevLine(ctx, t, pod.Metadata.Name)
	var seen []string
	for _, f := range strings.Fields(strings.TrimPrefix(line, "devs")) {
		path, dev, _ := strings.Cut(f, "=")
		if want := hexDev(t, filepath.Base(path)); dev != want {
			t.Fatalf("the pod sees %s as %s, the host has %s", path, dev, want)
		}
		seen = append(seen, path)
	}
	slices.Sort(seen)
	return seen, line
}

// checkPodTTYs checks that the pod sees exactly two ttys with the host's
// device numbers (in output printed since the last check), that they are
// the ones the kubelet allocated, the plugin holds for one mode-made
// request-id, and the CDI spec names, and returns them and the id.
func (b *pluginRun) checkPodTTYs(ctx context.Context, t *testing.T, pod Pod) ([]string, string) {
	t.Helper()
	seen, line := b.podTTYs(ctx, t, pod)
	if len(seen) != 2 {
		t.Fatalf("the pod sees the ttys %v, want two", seen)
	}
	allocs := b.allocations(ctx, t)
	if len(allocs) != 1 || !strings.HasPrefix(allocs[0].RequestID, "k8s-") {
		t.Fatalf("the plugin holds %+v, want one mode-made (k8s-) allocation", allocs)
	}
	held := slices.Sorted(slices.Values(allocs[0].Devices))
	keys := slices.Sorted(slices.Values(allocs[0].DeviceKeys))
	if !slices.Equal(held, seen) {
		t.Fatalf("the pod sees %v, the plugin holds %v", seen, held)
	}
	if k := b.kubeletDevices(t, pod.Metadata.UID); !slices.Equal(k, keys) {
		t.Fatalf("the kubelet allocated %v, the plugin holds the keys %v", k, keys)
	}
	specs := b.specs(t)
	if len(specs) != 1 {
		t.Fatalf("CDI spec files: %v, want one", specs)
	}
	for f, nodes := range specs {
		if !slices.Equal(nodes, seen) {
			t.Fatalf("%s names %v, the pod sees %v", f, nodes, seen)
		}
	}
	t.Logf("the pod sees %s; the kubelet allocated %v to %s", line, keys, allocs[0].RequestID)
	return seen, allocs[0].RequestID
}

// lastDevLine returns the last complete "devs" line the pod printed since
// the previous call, waiting for one.
func (b *pluginRun) lastDevLine(ctx context.Context, t *testing.T, pod string) string {
	var line string
	err := waitFor(ctx, "the pod's output", func(ctx context.Context) error {
		out, err := b.n.Logs(ctx, pod)
		if err != nil {
			return err
		}
		if len(out) < b.logLen {
			return fmt.Errorf("the pod's output shrank to %d bytes from %d", len(out), b.logLen)
		}
		fresh := out[b.logLen:]
		lines := strings.Split(fresh, "\n")
		for i := len(lines) - 2; i >= 0; i-- { // the last element follows the last newline
			if strings.HasPrefix(lines[i], "devs") {
				line, b.logLen = lines[i], len(out)
				return nil
			}
		}
		return fmt.Errorf("no new devs line in %q", fresh)
	}, b.n.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// stop sends the device-plugin mode SIGTERM and checks that it exits 0 and removes
// its socket from the kubelet's device-plugin dir.
func (b *pluginRun) stop(t *testing.T) {
	t.Helper()
	b.d.stop(10 * time.Second)
	if b.d.err != nil {
		t.Fatalf("the device-plugin mode exited with %v on SIGTERM; its log ends:\n%s", b.d.err, b.d.tail(20))
	}
	entries, err := os.ReadDir(b.socket)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "kubelet.sock" && e.Name() != "kubelet_internal_checkpoint" {
			t.Errorf("left in %s after SIGTERM: %s", b.socket, e.Name())
		}
	}
}

// ttyReserve picks a num_system_reserved for generic-tty well above every
// tty in use on this machine (open by a process, or the active console),
// leaving at least four to hand out; it skips the test when it cannot.
func ttyReserve(t *testing.T) int {
	highest, inUse := -1, 0
	entries, _ := os.ReadDir("/sys/class/tty")
	for _, e := range entries {
		if n, ok := ttyNumber(e.Name()); ok {
			highest = max(highest, n)
		}
	}
	links, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, l := range links {
		if to, err := os.Readlink(l); err == nil {
			if n, ok := ttyNumber(strings.TrimPrefix(to, "/dev/")); ok {
				inUse = max(inUse, n)
			}
		}
	}
	for _, f := range []string{"/sys/class/tty/tty0/active", "/sys/class/tty/console/active"} {
		data, _ := os.ReadFile(f)
		for _, name := range strings.Fields(string(data)) {
			if n, ok := ttyNumber(name); ok {
				inUse = max(inUse, n)
			}
		}
	}
	reserved := min(max(inUse+16, 32), highest-4)
	if reserved <= inUse {
		t.Skipf("this machine's virtual consoles go up to tty%d and tty%d is in use: fewer than four free ones to hand out", highest, inUse)
	}
	t.Logf("ttys up to tty%d, highest in use tty%d: num_system_reserved %d", highest, inUse, reserved)
	return reserved
}

// ttyNumber parses "ttyN".
func ttyNumber(name string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "tty"))
	return n, err == nil && strings.HasPrefix(name, "tty") && n >= 0
}

// hexDev returns a tty's major:minor as busybox stat prints them (%t:%T).
func hexDev(t *testing.T, name string) string {
	data, err := os.ReadFile(filepath.Join("/sys/class/tty", name, "dev"))
	if err != nil {
		t.Fatal(err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(data)), "%d:%d", &major, &minor); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x:%x", major, minor)
}
