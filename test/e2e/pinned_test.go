package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/test/fixture"
)

// pinTarget is one plugin set up for the pinned-ADD rules
// (docs/protocol.md#extension-pinned-add).
type pinTarget struct {
	name   string
	plugin string
	typ    string
	host   func() fixture.Host
	kernel bool   // run the simulated kernel (sriov)
	conf   string // its config
	strict string // the same with numa_policy strict; "" when it has none
	keys   []string
	nodes  map[string]string // the node a key hands out
	numa   map[string]int    // the NUMA node of a key, when known
	// unusable is a key the plugin sees but may not hand out, and why.
	unusable, why string
}

// pinHost has four GPUs of vendor 0x1002 alternating between NUMA nodes 0
// and 1 (cards 0-3), and one of vendor 0x10de (card 4), filtered out.
func pinHost() fixture.Host {
	var h fixture.Host
	for i := range 4 {
		h.GPUs = append(h.GPUs, gpuAt(fmt.Sprintf("0000:%02x:00.0", 0x10+i), "0x1002", i%2, i))
	}
	h.GPUs = append(h.GPUs, gpuAt("0000:20:00.0", "0x10de", 0, 4))
	return h
}

func pinTargets() []pinTarget {
	sriovArgs := `"pf_pci_addresses":["0000:03:00.0"],"num_vfs":4,` + drmDelegate
	return []pinTarget{
		{name: "generic-tty", plugin: "generic-tty", typ: "tty", host: func() fixture.Host { return specTTYHost },
			conf:     `{"cdiVersion":"0.0.2","name":"t","type":"tty","plugin":"generic-tty","args":{"num_system_reserved":12}}`,
			keys:     []string{"tty13", "tty14", "tty15"},
			nodes:    map[string]string{"tty13": "/dev/tty13", "tty14": "/dev/tty14", "tty15": "/dev/tty15"},
			unusable: "tty5", why: "reserved"},
		{name: "drm", plugin: "drm", typ: "gpu", host: pinHost,
			conf:     drmConf(`{"want_device_nodes":["primary"],"vendorid_whitelist":["0x1002"]}`),
			strict:   drmConf(`{"want_device_nodes":["primary"],"vendorid_whitelist":["0x1002"],"numa_policy":"strict"}`),
			keys:     []string{"0000:10:00.0", "0000:11:00.0", "0000:12:00.0"},
			nodes:    map[string]string{"0000:10:00.0": "/dev/dri/card0", "0000:11:00.0": "/dev/dri/card1", "0000:12:00.0": "/dev/dri/card2"},
			numa:     map[string]int{"0000:10:00.0": 0, "0000:11:00.0": 1, "0000:12:00.0": 0},
			unusable: "0000:20:00.0", why: "vendorid_whitelist"},
		{name: "sriov", plugin: "sriov", typ: "vgpu", host: sriovHost, kernel: true,
			conf:     sriovConf(`{` + sriovArgs + `}`),
			strict:   sriovConf(`{` + sriovArgs + `,"numa_policy":"strict"}`),
			keys:     []string{"0000:03:00.1", "0000:03:00.2", "0000:03:00.3"},
			nodes:    map[string]string{"0000:03:00.1": "/dev/dri/renderD160", "0000:03:00.2": "/dev/dri/renderD161", "0000:03:00.3": "/dev/dri/renderD162", "0000:03:00.4": "/dev/dri/renderD163"},
			numa:     map[string]int{"0000:03:00.1": 0, "0000:03:00.2": 0, "0000:03:00.3": 0},
			unusable: "0000:04:00.0", why: "no such device"},
	}
}

// pinNode is a node of one target.
type pinNode struct {
	*node
	tg pinTarget
}

func newPinNode(t *testing.T, tg pinTarget) *pinNode {
	t.Helper()
	n := &pinNode{node: newNode(t, tg.host()), tg: tg}
	if tg.kernel {
		k, err := fixture.StartKernel(n.root, tg.host())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Stop)
	}
	return n
}

// add runs a pinned ADD: amount and keys, then any further variables.
func (n *pinNode) add(conf, id string, amount int, keys string, env ...string) result {
	n.t.Helper()
	return n.run(n.tg.plugin, conf, append([]string{"CDI_PATH=" + binDir, "CDI_COMMAND=ADD", "CDI_REQUEST_ID=" + id,
		fmt.Sprintf("CDI_REQUEST=%s:%d", n.tg.typ, amount), "CDI_REQUEST_DEVICES=" + keys}, env...)...)
}

// want checks a successful ADD's devices against the keys' nodes.
func (n *pinNode) want(r result, keys ...string) {
	n.t.Helper()
	var nodes []string
	for _, k := range keys {
		nodes = append(nodes, n.tg.nodes[k])
	}
	if r.status != 0 || !slices.Equal(r.devices(n.t), nodes) {
		n.t.Fatalf("ADD: status %d, %s%s; want devices %v", r.status, r.stdout, r.stderr, nodes)
	}
}

// fail checks a failed ADD's code and that its details say each of says.
func (n *pinNode) fail(r result, code int, says ...string) {
	n.t.Helper()
	details, _ := r.obj(n.t)["details"].(string)
	if r.status != 1 || r.code(n.t) != code {
		n.t.Fatalf("status %d, %s; want code %d", r.status, r.stdout, code)
	}
	for _, s := range says {
		if !strings.Contains(details, s) {
			n.t.Fatalf("details %q do not say %q", details, s)
		}
	}
}

// held returns the device keys a request-id holds in the target's store.
func (n *pinNode) held(id string) []string {
	n.t.Helper()
	var keys []string
	if _, err := os.Stat(store.Path(n.state, n.tg.plugin)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if r := n.records(n.tg.plugin)[id]; r != nil {
		for _, d := range r.Devices() {
			keys = append(keys, d.Key)
		}
	}
	return keys
}

func TestPinnedADD(t *testing.T) {
	for _, tg := range pinTargets() {
		k := tg.keys
		t.Run(tg.name, func(t *testing.T) {
			t.Run("request errors are 102, a foreign spec is 4", func(t *testing.T) {
				n := newPinNode(t, tg)
				n.fail(n.add(tg.conf, "a", 2, k[0]+",,"+k[1]), 102, "CDI_REQUEST_DEVICES")
				n.fail(n.add(tg.conf, "a", 2, k[0]+","+k[0]), 102, "more than once")
				n.fail(n.add(tg.conf, "a", 1, k[0]+","+k[1]), 102, "names 2 devices")
				n.fail(n.add(tg.conf, "a", 3, k[0]+","+k[1]), 102, "names 2 devices")
				r := n.run(tg.plugin, tg.conf, "CDI_PATH="+binDir, "CDI_COMMAND=ADD", "CDI_REQUEST_ID=a",
					"CDI_REQUEST=other:2", "CDI_REQUEST_DEVICES="+k[0]+","+k[1])
				n.fail(r, 4)
				if len(n.held("a")) != 0 {
					t.Fatal("a failed ADD holds devices")
				}
			})
			t.Run("devices in the order of the keys; replay; another set is 104", func(t *testing.T) {
				n := newPinNode(t, tg)
				n.want(n.add(tg.conf, "a", 2, k[2]+","+k[0]), k[2], k[0])
				n.want(n.add(tg.conf, "a", 2, k[2]+","+k[0]), k[2], k[0])
				n.want(n.add(tg.conf, "a", 2, k[0]+","+k[2]), k[2], k[0]) // the same set
				n.fail(n.add(tg.conf, "a", 2, k[0]+","+k[1]), 104, k[0]+","+k[1])
				n.fail(n.add(tg.conf, "a", 1, k[0]), 104)
				if got := n.held("a"); !slices.Equal(got, []string{k[2], k[0]}) {
					t.Fatalf("store holds %v", got)
				}
			})
			t.Run("unknown, unusable and held keys are 103 naming them", func(t *testing.T) {
				n := newPinNode(t, tg)
				n.fail(n.add(tg.conf, "a", 2, k[0]+",nosuch9"), 103, "nosuch9: no such device")
				n.fail(n.add(tg.conf, "a", 1, tg.unusable), 103, tg.unusable+": ", tg.why)
				n.want(n.add(tg.conf, "first", 1, k[1]), k[1])
				n.fail(n.add(tg.conf, "second", 2, k[0]+","+k[1]), 103, k[1]+": held by another request")
				if len(n.held("second")) != 0 || len(n.held("a")) != 0 {
					t.Fatal("a failed ADD holds devices")
				}
				n.want(n.add(tg.conf, "second", 1, k[0]), k[0])
			})
			t.Run("locality is reported, not applied; strict does not refuse", func(t *testing.T) {
				n := newPinNode(t, tg)
				r := n.add(tg.conf, "a", 2, k[1]+","+k[0], "CDI_REQUEST_NUMA_LOCALITY=7")
				n.want(r, k[1], k[0])
				var want []any
				for _, node := range []int{0, 1} {
					for _, key := range k[:2] {
						if m, ok := tg.numa[key]; ok && m == node && !slices.Contains(want, any(float64(node))) {
							want = append(want, float64(node))
						}
					}
				}
				if got, _ := r.obj(t)["numa_locality"].([]any); !slices.Equal(got, want) {
					t.Fatalf("numa_locality %v, want %v", got, want)
				}
				if tg.strict != "" {
					n.want(n.add(tg.strict, "b", 1, k[2], "CDI_REQUEST_NUMA_LOCALITY=7"), k[2])
				}
			})
		})
	}
}

// The sriov plugin pins its delegate to the same VFs, in the same order,
// and partitions a PF for a pinned ADD as for any other.
func TestPinnedSRIOVDelegate(t *testing.T) {
	tg := pinTargets()[2]
	n := newPinNode(t, tg)
	n.want(n.add(tg.conf, "a", 2, "0000:03:00.4,0000:03:00.2"), "0000:03:00.4", "0000:03:00.2")
	n.want(n.add(tg.conf, "a", 2, "0000:03:00.4,0000:03:00.2"), "0000:03:00.4", "0000:03:00.2")
	var drm []string
	for _, d := range n.records("drm")["a"].Devices() {
		drm = append(drm, d.Key)
	}
	if !slices.Equal(drm, []string{"0000:03:00.4", "0000:03:00.2"}) {
		t.Fatalf("the delegate holds %v", drm)
	}
}

// Many processes pin the same key under different request-ids at once:
// exactly one gets it, every other is told the key is held.
func TestPinnedRace(t *testing.T) {
	const racers = 12
	for _, tg := range pinTargets() {
		t.Run(tg.name, func(t *testing.T) {
			n := newPinNode(t, tg)
			if tg.kernel { // partition once, so the racers contend only for the key
				n.want(n.add(tg.conf, "warm", 1, tg.keys[2]), tg.keys[2])
			}
			results := make([]result, racers)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					results[i] = raceAdd(t, n, fmt.Sprintf("racer%d", i))
				}()
			}
			close(start)
			wg.Wait()
			winners := 0
			for i, r := range results {
				switch {
				case r.status == 0:
					winners++
					if id := n.records(tg.plugin); id[fmt.Sprintf("racer%d", i)] == nil {
						t.Errorf("racer%d won but holds nothing", i)
					}
				case r.code(t) != 103 || !strings.Contains(r.stdout, tg.keys[0]+": held by another request"):
					t.Errorf("racer%d: %s%s", i, r.stdout, r.stderr)
				}
			}
			if winners != 1 {
				t.Fatalf("%d winners", winners)
			}
		})
	}
}

// raceAdd runs one racer's pinned ADD of the first key; it may not call
// t.Fatal from its goroutine.
func raceAdd(t *testing.T, n *pinNode, id string) result {
	cmd := exec.Command(filepath.Join(binDir, n.tg.plugin))
	env := []string{"CDI_HOST_ROOT=" + n.root, "CDI_STATE_DIR=" + n.state, "CDI_PATH=" + binDir, "CDI_LOCK_TIMEOUT=60",
		"CDI_COMMAND=ADD", "CDI_REQUEST_ID=" + id, "CDI_REQUEST=" + n.tg.typ + ":1", "CDI_REQUEST_DEVICES=" + n.tg.keys[0]}
	var out strings.Builder
	cmd.Env, cmd.Stdin, cmd.Stdout = env, strings.NewReader(n.tg.conf), &out
	err := cmd.Run()
	status := 0
	if ee, ok := err.(*exec.ExitError); ok {
		status = ee.ExitCode()
	} else if err != nil {
		t.Errorf("%s: %v", id, err)
	}
	return result{stdout: out.String(), status: status}
}
