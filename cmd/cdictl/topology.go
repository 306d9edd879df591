package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jaypipes/ghw"
	"github.com/jaypipes/ghw/pkg/cpu"
	"github.com/jaypipes/ghw/pkg/linuxpath"
	"github.com/jaypipes/ghw/pkg/memory"
	"github.com/jaypipes/ghw/pkg/topology"

	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

func topologyCommand() *command {
	return &command{name: "topology", complete: completeType, args: "[TYPE]", summary: "NUMA nodes: CPUs, memory, distances, PCIe root complexes and each plugin's devices",
		example: "cdictl topology -o table\n  cdictl topology gpu", setup: noFlags((*app).topology)}
}

// topoNode is one NUMA node as `cdictl topology` shows it.
type topoNode struct {
	ID          int    `json:"id"`
	CPUs        string `json:"cpus"`        // kernel list format, "0-7"
	MemoryBytes int64  `json:"memoryBytes"` // usable memory; 0 when unknown
	// Distances are the kernel's distances from this node to each node
	// listed, in the order listed; null on a host without a matrix.
	Distances []int        `json:"distances"`
	PCIeRoots []string     `json:"pcieRoots"`
	Devices   []topoDevice `json:"devices"`
}

// topoDevice is a device of a plugin's DEVICES answer, placed on a node.
type topoDevice struct {
	Type   string `json:"type"`
	Plugin string `json:"plugin"`
	protocol.DeviceInfo
}

// unplaced holds what sits on no known node of a multi-node host.
type unplaced struct {
	PCIeRoots []string     `json:"pcieRoots"`
	Devices   []topoDevice `json:"devices"`
}

// topology shows the host's NUMA layout: nodes with their CPUs and memory
// (read through ghw, chrooted at CDI_HOST_ROOT), the distance matrix and
// PCIe root complexes (internal/sysfs, as the plugins read them), and the
// devices of every configured plugin, from their DEVICES answers. A host
// without NUMA information shows one node holding everything.
func (a *app) topology(args []string) int {
	types, ok := a.typeArg(args)
	if !ok {
		return exitUsage
	}
	confs, err := a.configs(types...)
	if err != nil && len(types) > 0 {
		return a.fail(err)
	}
	if err != nil {
		a.note("%v: showing the host alone", err)
	}
	host := sysfs.NewHost(a.cfg.HostRoot)
	nodes, numa := a.numaNodes(host, ghwContext(a.cfg.HostRoot))
	byID := map[int]*topoNode{}
	for i := range nodes {
		byID[nodes[i].ID] = &nodes[i]
	}
	var rest unplaced
	place := func(numa int) (*[]string, *[]topoDevice) {
		switch n := byID[numa]; {
		case n != nil:
			return &n.PCIeRoots, &n.Devices
		case len(nodes) == 1: // one node holds everything
			return &nodes[0].PCIeRoots, &nodes[0].Devices
		}
		return &rest.PCIeRoots, &rest.Devices
	}
	for numa, roots := range a.rootComplexes(host) {
		r, _ := place(numa)
		*r = append(*r, roots...)
	}
	plugins, failed := callEach(a, confs, func(conf caller.Config, e *topoPlugin) error {
		devs, has, err := a.inventory(conf)
		e.NoInventory = !has
		for _, d := range devs {
			_, list := place(d.NUMA)
			*list = append(*list, topoDevice{Type: conf.Type, Plugin: conf.Plugin, DeviceInfo: d})
		}
		return err
	})
	tidy(nodes, &rest)
	a.report("NODE\tCPUS\tMEMORY\tDISTANCES\tPCIE ROOTS\tPCIE SWITCHES\tTYPE\tPLUGIN\tDEVICES", func() [][]string { return topologyRows(nodes, rest) },
		rawjson.Field{Key: "cdiVersion", Value: protocol.Latest}, rawjson.Field{Key: "numa", Value: numa},
		rawjson.Field{Key: "nodes", Value: nodes}, rawjson.Field{Key: "unplaced", Value: rest},
		rawjson.Field{Key: "plugins", Value: rawjson.NonNil(plugins)})
	return a.status(failed)
}

// topoPlugin is one plugin's outcome. NoInventory marks a plugin that has
// none of its own: it answered DEVICES with code 3 (unsupported).
type topoPlugin struct {
	outcome
	NoInventory bool `json:"noInventory,omitempty"`
}

// ghwContext configures ghw: the host below root, no external tools, no
// warnings on stderr (what ghw cannot read shows as unknown).
func ghwContext(root string) context.Context {
	ctx := ghw.ContextFromEnv()
	for _, m := range []ghw.Modifier{ghw.WithChroot(root), ghw.WithDisableTools(), ghw.WithDisableWarnings()} {
		ctx = m(ctx)
	}
	return ctx
}

// numaNodes lists the nodes with their CPUs, memory and distances, and
// whether the host has NUMA information at all; without it, one node 0
// holds every CPU and all memory. ghw's topology stops at the first node
// it cannot read completely (a missing distance file), so nodes it did not
// return are read one by one with ghw's per-node readers.
func (a *app) numaNodes(host *sysfs.Host, ctx context.Context) ([]topoNode, bool) {
	ids, err := host.NUMANodes()
	if err != nil {
		a.note("reading NUMA nodes: %v", err)
	}
	if len(ids) == 0 {
		return []topoNode{wholeMachine(ctx)}, false
	}
	dist, err := host.NUMADistances()
	if err != nil {
		a.note("%v: showing no distances", err)
	}
	read := map[int]*topology.Node{}
	if info, err := topology.New(ctx); err == nil {
		for _, n := range info.Nodes {
			read[n.ID] = n
		}
	}
	nodes := make([]topoNode, len(ids))
	for i, id := range ids {
		nodes[i] = topoNode{ID: id}
		if n := read[id]; n != nil {
			nodes[i].CPUs = cpuList(n.Cores)
			nodes[i].MemoryBytes = usable(n.Memory)
		} else {
			cores, _ := cpu.CoresForNode(ctx, id)
			area, _ := memory.AreaForNode(linuxpath.New(ctx), id)
			nodes[i].CPUs, nodes[i].MemoryBytes = cpuList(cores), usable(area)
		}
		if dist != nil {
			for _, to := range ids {
				nodes[i].Distances = append(nodes[i].Distances, dist[id][to])
			}
		}
	}
	return nodes, true
}

// wholeMachine is the one node of a host without NUMA information.
func wholeMachine(ctx context.Context) topoNode {
	n := topoNode{ID: 0}
	if info, err := cpu.New(ctx); err == nil {
		var cores []*cpu.ProcessorCore
		for _, p := range info.Processors {
			cores = append(cores, p.Cores...)
		}
		n.CPUs = cpuList(cores)
	}
	if info, err := memory.New(ctx); err == nil {
		n.MemoryBytes = info.TotalUsableBytes
	}
	return n
}

// cpuList writes the logical CPUs of cores in the kernel's list format.
func cpuList(cores []*cpu.ProcessorCore) string {
	var ids []int
	for _, c := range cores {
		ids = append(ids, c.LogicalProcessors...)
	}
	slices.Sort(ids)
	return sysfs.FormatList(slices.Compact(ids))
}

func usable(a *memory.Area) int64 {
	if a == nil {
		return 0
	}
	return max(a.TotalUsableBytes, 0)
}

// rootComplexes groups the host's PCIe root complexes by the NUMA nodes of
// their PCI functions; a root complex none of whose functions knows its
// node is filed under alloc's Unknown, -1.
func (a *app) rootComplexes(host *sysfs.Host) map[int][]string {
	fns, err := host.PCIFunctions()
	if err != nil {
		a.note("listing PCI functions: %v", err)
	}
	nodes := map[string][]int{} // by root complex
	for _, fn := range fns {
		path, err := host.Resolve(host.PCIDir(fn))
		if err != nil {
			continue
		}
		numa, pcie := host.Place(path)
		if pcie.Root != "" && !slices.Contains(nodes[pcie.Root], numa) {
			nodes[pcie.Root] = append(nodes[pcie.Root], numa)
		}
	}
	out := map[int][]string{}
	for root, ns := range nodes {
		if len(ns) > 1 {
			ns = slices.DeleteFunc(ns, func(n int) bool { return n < 0 })
		}
		for _, n := range ns {
			out[n] = append(out[n], root)
		}
	}
	return out
}

// tidy sorts what was gathered and turns nils into empty lists.
func tidy(nodes []topoNode, rest *unplaced) {
	sortAll := func(roots *[]string, devs *[]topoDevice) {
		*roots = rawjson.NonNil(*roots)
		slices.Sort(*roots)
		*roots = slices.Compact(*roots)
		*devs = rawjson.NonNil(*devs)
	}
	for i := range nodes {
		sortAll(&nodes[i].PCIeRoots, &nodes[i].Devices)
	}
	sortAll(&rest.PCIeRoots, &rest.Devices)
}

// topologyRows is the table: per node a row for each plugin with devices
// there (the node's columns on its first row only), then rows for what
// sits on no known node.
func topologyRows(nodes []topoNode, rest unplaced) [][]string {
	var rows [][]string
	add := func(head []string, devs []topoDevice) {
		groups := byPlugin(devs)
		if len(groups) == 0 {
			rows = append(rows, append(head, "-", "-", "-"))
		}
		for i, g := range groups {
			if i > 0 {
				head = []string{"", "", "", "", "", ""}
			}
			rows = append(rows, append(head, g[0].Type, g[0].Plugin, compactKeys(g)))
		}
	}
	for _, n := range nodes {
		dist := "-"
		if n.Distances != nil {
			dist = strings.Trim(fmt.Sprint(n.Distances), "[]")
		}
		add([]string{strconv.Itoa(n.ID), dash(n.CPUs), gib(n.MemoryBytes), dist, dash(strings.Join(n.PCIeRoots, " ")), switches(n.Devices)}, n.Devices)
	}
	if len(rest.PCIeRoots)+len(rest.Devices) > 0 {
		add([]string{"?", "-", "-", "-", dash(strings.Join(rest.PCIeRoots, " ")), switches(rest.Devices)}, rest.Devices)
	}
	return rows
}

// switches lists the PCIe switches devices sit under, each once, with the
// devices below it: "0000:16:00.0 (0000:18:00.0 0000:19:00.0)"; "-" for
// none.
func switches(devs []topoDevice) string {
	var order []string
	below := map[string][]string{}
	for _, d := range devs {
		if d.PCIeSwitch == "" {
			continue
		}
		if _, ok := below[d.PCIeSwitch]; !ok {
			order = append(order, d.PCIeSwitch)
		}
		below[d.PCIeSwitch] = append(below[d.PCIeSwitch], d.Key)
	}
	parts := make([]string, len(order))
	for i, sw := range order {
		parts[i] = sw + " (" + strings.Join(below[sw], " ") + ")"
	}
	return dash(strings.Join(parts, " "))
}

// byPlugin splits devices into runs of one type and plugin.
func byPlugin(devs []topoDevice) [][]topoDevice {
	var out [][]topoDevice
	for i := 0; i < len(devs); {
		j := i + 1
		for j < len(devs) && devs[j].Type == devs[i].Type && devs[j].Plugin == devs[i].Plugin {
			j++
		}
		out = append(out, devs[i:j])
		i = j
	}
	return out
}

// compactKeys lists device keys, writing runs of numbered names as one
// range: "tty13..tty63 ttyS0". Unusable devices follow, grouped by why:
// "...; unusable, no render node: a display-only adapter: 0000:03:00.0".
func compactKeys(devs []topoDevice) string {
	var reasons []string
	byReason := map[string][]topoDevice{}
	for _, d := range devs {
		r := ""
		if !d.Usable {
			r = d.Reason
		}
		if _, ok := byReason[r]; !ok && r != "" {
			reasons = append(reasons, r)
		}
		byReason[r] = append(byReason[r], d)
	}
	var parts []string
	if usable := byReason[""]; len(usable) > 0 {
		parts = append(parts, compactRuns(usable))
	}
	for _, r := range reasons {
		parts = append(parts, "unusable, "+r+": "+compactRuns(byReason[r]))
	}
	return strings.Join(parts, "; ")
}

// compactRuns lists device keys, writing runs of numbered names as one
// range.
func compactRuns(devs []topoDevice) string {
	var parts []string
	for i := 0; i < len(devs); {
		prefix, n, ok := numbered(devs[i].Key)
		j := i + 1
		for ok && j < len(devs) {
			p, m, ok2 := numbered(devs[j].Key)
			if !ok2 || p != prefix || m != n+(j-i) {
				break
			}
			j++
		}
		if j-i > 2 {
			parts = append(parts, devs[i].Key+".."+devs[j-1].Key)
		} else {
			for _, d := range devs[i:j] {
				parts = append(parts, d.Key)
			}
		}
		i = j
	}
	return strings.Join(parts, " ")
}

// numbered splits a name such as "tty13" into its prefix and number.
func numbered(key string) (string, int, bool) {
	i := len(key)
	for i > 0 && key[i-1] >= '0' && key[i-1] <= '9' {
		i--
	}
	n, err := strconv.Atoi(key[i:])
	return key[:i], n, err == nil && i > 0 && i < len(key) && !strings.ContainsAny(key, ":/")
}

func dash(s string) string { return cmp.Or(s, "-") }

// gib writes a memory size in GiB, "-" when unknown.
func gib(n int64) string {
	if n <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// note tells of something cdictl could not read, on stderr.
func (a *app) note(format string, args ...any) {
	fmt.Fprintf(a.stderr, "cdictl: %s\n", fmt.Sprintf(format, args...))
}
