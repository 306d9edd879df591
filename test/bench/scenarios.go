package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/test/fixture"
)

// gpuSizes are the GPU counts measured, with the NUMA nodes they spread over.
var gpuSizes = []struct{ count, nodes int }{{8, 2}, {64, 4}, {256, 4}, {1024, 8}}

// gpus lays out count GPUs spread evenly over nodes NUMA nodes.
func gpus(count, nodes int) fixture.Host {
	var h fixture.Host
	for i := range count {
		h.GPUs = append(h.GPUs, fixture.GPU{
			Addr: fmt.Sprintf("0000:%02x:%02x.0", 0x10+i/32, i%32), Vendor: "0x10de", Device: "0x2330",
			NUMA: fixture.Int(i * nodes / count), Driver: "nvidia", Card: i, Render: 128 + i, Control: -1,
		})
	}
	return h
}

// node is a fixture host and a plugin configured on it.
type node struct {
	root, bin, conf, typ string
	work                 string
}

// env is the protocol environment of a command on the node, with its own
// state directory.
func (n node) env(state string, extra ...string) []string {
	return append([]string{"CDI_HOST_ROOT=" + n.root, "CDI_STATE_DIR=" + n.state(state), "CDI_VERSION=" + protocol.Latest}, extra...)
}

func (n node) state(name string) string { return filepath.Join(n.work, "state", name) }

func (n node) call(state string, extra ...string) proc {
	return proc{bin: n.bin, stdin: n.conf, env: n.env(state, extra...)}
}

func (n node) add(state, id string) proc {
	return n.call(state, "CDI_COMMAND=ADD", "CDI_REQUEST="+n.typ+":1", "CDI_REQUEST_ID="+id)
}

func (n node) del(state, id string) proc {
	return n.call(state, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+id)
}

// fill allocates count devices, one request each, before timing.
func (n node) fill(state string, count int) func() error {
	return func() error {
		for i := range count {
			if _, err := timed(n.add(state, fmt.Sprintf("fill%d", i))); err != nil {
				return err
			}
		}
		return nil
	}
}

// info times INFO.
func (n node) info(name, state string) scenario {
	return scenario{name: name, state: n.state(state), each: func(int) (proc, proc) {
		return n.call(state, "CDI_COMMAND=INFO"), proc{}
	}}
}

// addScenario times ADD of one device under a fresh id after held devices
// were allocated; the id is released untimed.
func (n node) addScenario(name, state string, held int) scenario {
	return scenario{name: name, state: n.state(state), setup: n.fill(state, held), each: func(i int) (proc, proc) {
		id := fmt.Sprintf("b%d", i)
		return n.add(state, id), n.del(state, id)
	}}
}

// delScenario times DEL of an id allocated untimed just before, with held
// devices allocated by other ids.
func (n node) delScenario(name, state string, held int) scenario {
	return scenario{name: name, state: n.state(state),
		setup: func() error {
			if err := n.fill(state, held)(); err != nil {
				return err
			}
			_, err := timed(n.add(state, "d0"))
			return err
		},
		each: func(i int) (proc, proc) {
			return n.del(state, fmt.Sprintf("d%d", i)), n.add(state, fmt.Sprintf("d%d", i+1))
		}}
}

// churned times ADD after cycles ADD/DEL pairs and held allocations, as on
// a long-lived node.
func (n node) churned(name, state string, cycles, held int) scenario {
	s := n.addScenario(name, state, held)
	fill := s.setup
	s.setup = func() error {
		for i := range cycles {
			id := fmt.Sprintf("churn%d", i)
			if _, err := timed(n.add(state, id)); err != nil {
				return err
			}
			if _, err := timed(n.del(state, id)); err != nil {
				return err
			}
		}
		return fill()
	}
	return s
}

// missed times INFO right after the inventory changed: before each run the
// kernel's uevent sequence number moves and a GPU is unplugged or plugged
// back (its class link is removed or restored), and any derived cache in
// the state directory is removed.
func (n node) missed(name, state, card string) scenario {
	s := n.info(name, state)
	link := filepath.Join(n.root, "sys/class/drm", card)
	target, err := os.Readlink(link)
	s.before = func(i int) error {
		if err != nil {
			return err
		}
		if err := bumpSeqnum(n.root); err != nil {
			return err
		}
		if err := removeCaches(n.state(state)); err != nil {
			return err
		}
		if i%2 == 0 {
			return os.Remove(link)
		}
		return os.Symlink(target, link)
	}
	return s
}

// bumpSeqnum advances sys/kernel/uevent_seqnum of a fixture host, as every
// uevent does on a real kernel.
func bumpSeqnum(root string) error {
	p := filepath.Join(root, "sys/kernel/uevent_seqnum")
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return os.WriteFile(p, []byte("1\n"), 0o644)
	} else if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return os.WriteFile(p, []byte(strconv.Itoa(n+1)+"\n"), 0o644)
}

// removeCaches removes derived caches (*.cache) from a state directory.
func removeCaches(state string) error {
	m, err := filepath.Glob(filepath.Join(state, "*.cache"))
	for _, f := range m {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	return err
}

func build(work, name string, h fixture.Host) (string, error) {
	root := filepath.Join(work, "hosts", name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	return root, h.Build(root)
}

func prepare(work string, o options) ([]scenario, error) {
	tty, drm := filepath.Join(o.bin, "generic-tty"), filepath.Join(o.bin, "drm")
	ttyConf := `{"cdiVersion":"0.0.2","name":"tty","type":"tty","plugin":"generic-tty","args":{"num_system_reserved":12}}`
	gpuConf := `{"cdiVersion":"0.0.2","name":"gpu","type":"gpu","plugin":"drm"}`
	var out []scenario

	demo, err := demoScenarios(work, tty, drm)
	if err != nil {
		return nil, err
	}
	out = append(out, demo...)

	root, err := build(work, "tty63", fixture.Host{TTYs: map[string]int{"tty": 64}})
	if err != nil {
		return nil, err
	}
	t := node{root: root, bin: tty, conf: ttyConf, typ: "tty", work: work}
	out = append(out, t.info("tty63 INFO", "tty-info"), t.addScenario("tty63 ADD", "tty-add", 0),
		t.delScenario("tty63 DEL", "tty-del", 0))

	for _, sz := range gpuSizes {
		name := fmt.Sprintf("gpu%d", sz.count)
		root, err := build(work, name, gpus(sz.count, sz.nodes))
		if err != nil {
			return nil, err
		}
		g := node{root: root, bin: drm, conf: gpuConf, typ: "gpu", work: work}
		held := sz.count * 3 / 4
		out = append(out, g.info(name+" INFO", name+"-info"),
			g.addScenario(fmt.Sprintf("%s ADD (%d held)", name, held), name+"-add", held),
			g.delScenario(fmt.Sprintf("%s DEL (%d held)", name, held), name+"-del", held))
		if sz.count == 64 {
			out = append(out, g.missed(name+" INFO (cache miss)", name+"-miss", "card63"),
				g.addScenario(name+" ADD (fresh store)", name+"-fresh", 0))
			if o.churn {
				out = append(out, g.churned(name+" ADD (48 held, after 10000 ADD/DEL)", name+"-churn", 10000, held))
			}
		}
	}
	if o.hostLocal {
		hl, err := hostLocalScenarios(work)
		if err != nil {
			return nil, err
		}
		out = append(out, hl...)
	}
	return out, nil
}

// demoScenarios time the demo host with the demo's own configs.
func demoScenarios(work, tty, drm string) ([]scenario, error) {
	h, err := fixture.Load("demo/host.json")
	if err != nil {
		return nil, fmt.Errorf("the demo host (run from the repository root): %w", err)
	}
	root, err := build(work, "demo", h)
	if err != nil {
		return nil, err
	}
	read := func(rel string) (string, error) {
		b, err := os.ReadFile(filepath.Join("demo", "conf", rel))
		return string(b), err
	}
	ttyConf, err := read("tty.d/generic-tty.conf")
	if err != nil {
		return nil, err
	}
	gpuConf, err := read("gpu.d/drm.conf")
	if err != nil {
		return nil, err
	}
	t := node{root: root, bin: tty, conf: ttyConf, typ: "tty", work: work}
	g := node{root: root, bin: drm, conf: gpuConf, typ: "gpu", work: work}
	return []scenario{
		t.info("demo tty INFO", "demo-tty-info"), t.addScenario("demo tty ADD", "demo-tty-add", 0),
		g.info("demo gpu INFO", "demo-gpu-info"), g.addScenario("demo gpu ADD", "demo-gpu-add", 0),
	}, nil
}
