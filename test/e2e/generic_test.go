package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/test/fixture"
	"github.com/cdi-exec/plugins/test/kubelettest"
)

// genericNode is the generic-devices fixture host. Path rules find a
// node's device through /sys/dev/char by its number, so they need real
// device nodes.
func genericNode(t *testing.T) *node {
	t.Helper()
	needRealNodes(t)
	return newNode(t, fixture.GenericDevices())
}

// inventory runs DEVICES and decodes it.
func (n *node) inventory(plugin, conf string) []protocol.DeviceInfo {
	n.t.Helper()
	r := n.run(plugin, conf, "CDI_COMMAND=DEVICES")
	var inv struct{ Devices []protocol.DeviceInfo }
	if r.status != 0 || json.Unmarshal([]byte(r.stdout), &inv) != nil {
		n.t.Fatalf("DEVICES: %d %s %s", r.status, r.stdout, r.stderr)
	}
	return inv.Devices
}

// The commands on the generic-devices host, against golden answers:
// INFO counts units times shares; ADD hands out the lowest units first
// (share 0 of every unit before share 1 of any), a pinned ADD takes the
// unit its key names, a NUMA request the NPU on node 1; DEVICES lists
// every unit with its attributes, holders and shares; DEL frees.
func TestGenericGolden(t *testing.T) {
	n := genericNode(t)
	conf := readConf(t, "generic.conf")
	n.goldenSteps(t, "generic", conf, []goldenStep{
		{"generic_info", env("CDI_COMMAND=INFO"), 0},
		{"generic_add", env("CDI_COMMAND=ADD", "CDI_REQUEST=dev:3", "CDI_REQUEST_ID=serials"), 0},
		{"generic_add", env("CDI_COMMAND=ADD", "CDI_REQUEST=dev:3", "CDI_REQUEST_ID=serials"), 0}, // replay
		{"generic_add_camera", env("CDI_COMMAND=ADD", "CDI_REQUEST=dev:1", "CDI_REQUEST_ID=cam", "CDI_REQUEST_DEVICES=046d:085c:8E5F2B3F"), 0},
		{"generic_add_numa", env("CDI_COMMAND=ADD", "CDI_REQUEST=dev:1", "CDI_REQUEST_ID=npu", "CDI_REQUEST_NUMA_LOCALITY=1"), 0},
		{"generic_add_kvm", env("CDI_COMMAND=ADD", "CDI_REQUEST=dev:1", "CDI_REQUEST_ID=vm1", "CDI_REQUEST_DEVICES=kvm"), 0},
		{"generic_add_kvm", env("CDI_COMMAND=ADD", "CDI_REQUEST=dev:1", "CDI_REQUEST_ID=vm2", "CDI_REQUEST_DEVICES=kvm"), 0},
		{"generic_info", env("CDI_COMMAND=INFO"), 0}, // capacity, not what is free
		{"generic_devices", env("CDI_COMMAND=DEVICES"), 0},
		{"del_ok", env("CDI_COMMAND=DEL", "CDI_REQUEST_ID=serials"), 0},
		{"generic_del_unknown", env("CDI_COMMAND=DEL", "CDI_REQUEST_ID=serials"), 0},
	})
}

// Three requests hold the three shares of kvm at once; a fourth gets 103,
// by count or pinned, until one is freed. One request may hold two shares:
// it gets the node once.
func TestGenericShares(t *testing.T) {
	n := newNode(t, fixture.Host{Misc: []fixture.Misc{fixture.KVM}})
	conf := `{"cdiVersion":"0.0.2","name":"kvm","type":"kvm","plugin":"generic","args":{"rules":[{"paths":["/dev/kvm"],"shares":3}]}}`
	needRealNodes(t)
	if got := n.run("generic", conf, "CDI_COMMAND=INFO").obj(t)["kvm"]; got != float64(3) {
		t.Fatalf("INFO kvm = %v, want 3", got)
	}
	for i := range 3 {
		r := n.run("generic", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:1", fmt.Sprintf("CDI_REQUEST_ID=vm%d", i))
		if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/kvm" {
			t.Fatalf("ADD vm%d: %s", i, r.stdout)
		}
	}
	if r := n.run("generic", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:1", "CDI_REQUEST_ID=vm3"); r.code(t) != 103 {
		t.Fatalf("4th ADD: %s", r.stdout)
	}
	if r := n.run("generic", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:1", "CDI_REQUEST_ID=vm3", "CDI_REQUEST_DEVICES=kvm"); r.code(t) != 103 || !strings.Contains(r.stdout, "kvm: held by another request") {
		t.Fatalf("4th pinned ADD: %s", r.stdout)
	}
	inv := n.inventory("generic", conf)
	if len(inv) != 1 || inv[0].Shares != 3 || strings.Join(inv[0].Holders, ",") != "vm0,vm1,vm2" || inv[0].HeldBy != "" {
		t.Fatalf("DEVICES: %+v", inv)
	}
	if r := n.run("generic", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=vm1"); r.status != 0 || r.stdout != "" {
		t.Fatalf("DEL: %s", r.stdout)
	}
	r := n.run("generic", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:1", "CDI_REQUEST_ID=vm3", "CDI_REQUEST_DEVICES=kvm")
	if r.status != 0 {
		t.Fatalf("pinned ADD after a DEL: %s", r.stdout)
	}
	// Replay of the pinned unit is the same share.
	if r := n.run("generic", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:1", "CDI_REQUEST_ID=vm3", "CDI_REQUEST_DEVICES=kvm"); r.status != 0 {
		t.Fatalf("pinned replay: %s", r.stdout)
	}
	recs := n.records("generic")
	if k := recs["vm3"].Devices()[0].Key; k != "kvm/1" {
		t.Errorf("vm3 holds %s, want the share vm1 freed, kvm/1", k)
	}
	// Two shares in one request: the node once.
	for _, id := range []string{"vm0", "vm2", "vm3"} {
		n.run("generic", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+id)
	}
	r = n.run("generic", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:2", "CDI_REQUEST_ID=big")
	if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/kvm" {
		t.Fatalf("kvm:2: %s", r.stdout)
	}
	if got := len(n.records("generic")["big"].Devices()); got != 2 {
		t.Errorf("kvm:2 holds %d shares", got)
	}
	// DEVICES lists a holder per held share: big twice, then vm4.
	n.run("generic", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:1", "CDI_REQUEST_ID=vm4")
	if inv := n.inventory("generic", conf); len(inv) != 1 || strings.Join(inv[0].Holders, ",") != "big,big,vm4" {
		t.Errorf("DEVICES after kvm:2 and kvm:1: %+v", inv)
	}
}

// A held adapter that comes back under another name after a replug
// (ttyUSB0 → ttyUSB3, on another port) is still its holder's: a replay
// answers with the new name, DEVICES says who holds it, and a second
// request gets the other adapter, even the one that took the old name.
func TestGenericReplug(t *testing.T) {
	needRealNodes(t)
	before := fixture.Host{USBHosts: []fixture.USBHost{{Addr: "0000:00:14.0", NUMA: fixture.Int(0)}},
		USBDevices: []fixture.USBDevice{fixture.CH340("1", 0, "A50285BI"), fixture.CH340("2", 1, "B71234XY")}}
	n := newNode(t, before)
	conf := `{"cdiVersion":"0.0.2","name":"serial","type":"serial","plugin":"generic","args":{"rules":[{"paths":["/dev/ttyUSB*"],"usb":{"vendor":"1a86"}}]}}`
	r := n.run("generic", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=serial:1", "CDI_REQUEST_ID=a", "CDI_REQUEST_DEVICES=1a86:7523:A50285BI")
	if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/ttyUSB0" {
		t.Fatalf("ADD: %s", r.stdout)
	}
	// Both adapters unplugged and plugged back the other way round: B
	// comes first and takes ttyUSB0; A comes back as ttyUSB3.
	after := before
	after.USBDevices = []fixture.USBDevice{fixture.CH340("2", 0, "B71234XY"), fixture.CH340("6", 3, "A50285BI")}
	root := filepath.Join(t.TempDir(), "replugged")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := after.Build(root); err != nil {
		t.Fatal(err)
	}
	n.root = root
	r = n.run("generic", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=serial:1", "CDI_REQUEST_ID=a", "CDI_REQUEST_DEVICES=1a86:7523:A50285BI")
	if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/ttyUSB3" {
		t.Fatalf("replay after the replug: %s", r.stdout)
	}
	r = n.run("generic", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=serial:1", "CDI_REQUEST_ID=b")
	if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/ttyUSB0" {
		t.Fatalf("second request: %s", r.stdout)
	}
	if r := n.run("generic", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=serial:1", "CDI_REQUEST_ID=c"); r.code(t) != 103 {
		t.Fatalf("third request: %s", r.stdout)
	}
	for _, d := range n.inventory("generic", conf) {
		want := map[string]string{"1a86:7523:A50285BI": "a /dev/ttyUSB3", "1a86:7523:B71234XY": "b /dev/ttyUSB0"}[d.Key]
		if got := d.HeldBy + " " + strings.Join(d.Nodes, " "); got != want {
			t.Errorf("DEVICES %s: %q, want %q", d.Key, got, want)
		}
	}
	// The adapter without a serial is keyed by its port.
	if k := newNodeKeys(t, fixture.CH340("3", 2, ""), conf); k != "1a86:7523:port-1-3" {
		t.Errorf("key without a serial: %s", k)
	}
}

// newNodeKeys is the key DEVICES gives the one adapter of a fresh host.
func newNodeKeys(t *testing.T, d fixture.USBDevice, conf string) string {
	t.Helper()
	n := newNode(t, fixture.Host{USBHosts: []fixture.USBHost{{Addr: "0000:00:14.0"}}, USBDevices: []fixture.USBDevice{d}})
	inv := n.inventory("generic", conf)
	if len(inv) != 1 {
		t.Fatalf("DEVICES: %+v", inv)
	}
	return inv[0].Key
}

// A unit is usable only when each of its nodes is the character device
// sysfs describes: a camera missing one of its two nodes is not handed
// out, and DEVICES says why.
func TestGenericUnitNeedsEveryNode(t *testing.T) {
	n := genericNode(t)
	if err := os.Remove(filepath.Join(n.root, "dev/video1")); err != nil {
		t.Fatal(err)
	}
	conf := `{"cdiVersion":"0.0.2","name":"cam","type":"camera","plugin":"generic","args":{"rules":[{"class":"video4linux","group":"usb"}]}}`
	if got := n.run("generic", conf, "CDI_COMMAND=INFO").obj(t)["camera"]; got != float64(0) {
		t.Fatalf("INFO = %v", got)
	}
	inv := n.inventory("generic", conf)
	if len(inv) != 1 || inv[0].Usable || inv[0].Reason != "/dev/video1: no /dev/video1" {
		t.Fatalf("DEVICES: %+v", inv)
	}
	if r := n.run("generic", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=camera:1", "CDI_REQUEST_ID=x", "CDI_REQUEST_DEVICES="+inv[0].Key); r.code(t) != 103 || !strings.Contains(r.stdout, "no /dev/video1") {
		t.Fatalf("pinned ADD: %s", r.stdout)
	}
}

// genericChaosConf hands out the three serial adapters exclusively and
// kvm, fuse and tun with three shares each, publishing CDI specs.
func genericChaosConf(specDir string) string {
	return `{"cdiVersion":"0.0.2","name":"d","type":"dev","plugin":"generic","args":{"rules":[` +
		`{"paths":["/dev/ttyUSB*"]},{"paths":["/dev/kvm","/dev/fuse","/dev/net/tun"],"shares":3}],` +
		`"cdi_spec":{"kind":"example.com/dev","dir":"` + specDir + `"}}}`
}

// checkShares fails when a unit has more holders than shares, or a share
// is held twice (the store's index forbids it; this reads every record).
func checkShares(t *testing.T, recs map[string]*store.Record, shares map[string]int) {
	t.Helper()
	slot := map[string]string{}
	holders := map[string]map[string]bool{}
	for id, r := range recs {
		for _, d := range r.Devices() {
			if h, ok := slot[d.Key]; ok {
				t.Errorf("share %s held by %s and %s", d.Key, h, id)
			}
			slot[d.Key] = id
			u := pool.Unit(d.Key)
			if holders[u] == nil {
				holders[u] = map[string]bool{}
			}
			holders[u][id] = true
		}
	}
	for u, hs := range holders {
		if max := shares[u]; len(hs) > max {
			t.Errorf("%s has %d holders, %d shares", u, len(hs), max)
		}
	}
}

// The kill test of generic-tty and drm (TestKillDuringAddDel), for the
// generic plugin with shares: processes are killed at random moments
// while others allocate and free; afterwards the stores are sound,
// nothing is held twice and no unit has more holders than shares,
// every live id's spec names what it holds, and freeing every id gives
// back the whole capacity.
func TestGenericKillDuringAddDel(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	n := genericNode(t)
	specDir := filepath.Join(t.TempDir(), "cdi")
	conf := genericChaosConf(specDir)
	bin := filepath.Join(binDir, "generic")
	db := store.Path(n.state, "generic")
	const workers, rounds, maxRounds, minKillsInStore = 4, 150, 1500, 20
	rng := rand.New(rand.NewPCG(3, 4))
	var mu sync.Mutex
	delay := func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(rng.IntN(8000)) * time.Microsecond
	}
	killed, inTx, started := 0, 0, 0
	more := func(i int) bool {
		mu.Lock()
		defer mu.Unlock()
		return i < rounds || inTx < minKillsInStore && i < maxRounds
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; more(i); i++ {
				id := fmt.Sprintf("w%d-%d", w, i%5)
				cmdEnv := []string{"CDI_HOST_ROOT=" + n.root, "CDI_STATE_DIR=" + n.state, "CDI_REQUEST_ID=" + id}
				switch i % 4 {
				case 0:
					cmdEnv = append(cmdEnv, "CDI_COMMAND=ADD", "CDI_REQUEST=dev:2")
				case 2:
					cmdEnv = append(cmdEnv, "CDI_COMMAND=ADD", "CDI_REQUEST=dev:1", "CDI_REQUEST_DEVICES=kvm")
				default:
					cmdEnv = append(cmdEnv, "CDI_COMMAND=DEL")
				}
				cmd := exec.Command(bin)
				cmd.Env = cmdEnv
				cmd.Stdin = strings.NewReader(conf)
				if err := cmd.Start(); err != nil {
					t.Error(err)
					return
				}
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				mu.Lock()
				started++
				mu.Unlock()
				select {
				case <-done:
				case <-time.After(delay()):
					stopped := cmd.Process.Signal(syscall.SIGSTOP) == nil
					in := stopped && inStore(cmd.Process.Pid, db)
					_ = cmd.Process.Signal(syscall.SIGKILL)
					<-done
					mu.Lock()
					if stopped {
						killed++
					}
					if in {
						inTx++
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d of %d processes killed, %d of them with the store open", killed, started, inTx)
	if inTx < minKillsInStore {
		t.Errorf("only %d of %d kills landed with the store open, want at least %d", inTx, killed, minKillsInStore)
	}
	n.checkStores(t)
	shares := map[string]int{"kvm": 3, "fuse": 3, "tun": 3}
	for _, d := range n.inventory("generic", conf) {
		if shares[d.Key] == 0 {
			shares[d.Key] = 1
		}
	}
	recs := n.records("generic")
	checkShares(t, recs, shares)
	old := time.Now().Add(-time.Hour)
	for _, p := range n.litter(t, specDir) {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	valid := "none"
	if len(recs) > 0 {
		valid = strings.Join(slices.Collect(maps.Keys(recs)), ",")
	}
	if r := n.run("generic", conf, "CDI_COMMAND=GC", "CDI_VALID_REQUEST_IDS="+valid); r.status != 0 || strings.Contains(r.stdout, "freed\": [\"") {
		t.Fatalf("GC keeping every id: %s", r.stdout)
	}
	for id, rec := range recs {
		for _, al := range rec.Allocations {
			e := []string{"CDI_COMMAND=ADD", "CDI_REQUEST=" + al.Spec + ":" + fmt.Sprint(al.Amount), "CDI_REQUEST_ID=" + id}
			if al.Amount == 1 && pool.Unit(al.Devices[0].Key) == "kvm" {
				e = append(e, "CDI_REQUEST_DEVICES=kvm")
			}
			if r := n.run("generic", conf, e...); r.status != 0 {
				t.Fatalf("replay %s: %s", id, r.stdout)
			}
		}
	}
	if left := n.litter(t, specDir); len(left) != 0 {
		t.Errorf("litter left after the sweep: %v", left)
	}
	files, _ := filepath.Glob(filepath.Join(specDir, "example.com-dev_*.json"))
	if len(files) != len(recs) {
		t.Errorf("%d spec files for %d records", len(files), len(recs))
	}
	for id := range recs {
		if r := n.run("generic", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+id); r.status != 0 || r.stdout != "" {
			t.Fatalf("DEL %s: %s", id, r.stdout)
		}
	}
	if recs := n.records("generic"); len(recs) != 0 {
		t.Fatalf("left after DEL of every id: %v", recs)
	}
	// 3 adapters and 3 × 3 shares: 12, all free again.
	if r := n.run("generic", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=dev:12", "CDI_REQUEST_ID=all"); r.status != 0 {
		t.Fatalf("not everything is free again: %s", r.stdout)
	}
	n.checkStores(t)
}

// Workers run random ADD and DEL against a model of what each id holds
// (TestInterleavingAgainstModel for generic-tty), with shares: an
// exclusive node is never handed to two ids at once, a shared one to no
// more than its shares, and the store matches the model at the end.
func TestGenericInterleavingAgainstModel(t *testing.T) {
	n := genericNode(t)
	conf := genericChaosConf(filepath.Join(t.TempDir(), "cdi"))
	const workers, steps = 4, 30
	shares := map[string]int{"/dev/kvm": 3, "/dev/fuse": 3, "/dev/net/tun": 3}
	var mu sync.Mutex
	heldBy := map[string]map[string]bool{} // node → ids
	model := make([]map[string][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		model[w] = map[string][]string{}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for range steps {
				id := fmt.Sprintf("w%d-%d", w, rng.IntN(3))
				if rng.IntN(2) == 0 {
					amount := 1 + rng.IntN(3)
					r := n.run("generic", conf, "CDI_COMMAND=ADD", fmt.Sprintf("CDI_REQUEST=dev:%d", amount), "CDI_REQUEST_ID="+id)
					prev, had := model[w][id]
					switch {
					case r.status == 0:
						d := r.devices(t)
						if had && strings.Join(d, " ") != strings.Join(prev, " ") {
							t.Errorf("%s replay changed devices: %v then %v", id, prev, d)
						}
						mu.Lock()
						for _, dev := range d {
							if heldBy[dev] == nil {
								heldBy[dev] = map[string]bool{}
							}
							heldBy[dev][id] = true
							if max := max(shares[dev], 1); len(heldBy[dev]) > max {
								t.Errorf("%s handed to %d ids at once: %v", dev, len(heldBy[dev]), heldBy[dev])
							}
						}
						mu.Unlock()
						model[w][id] = d
					case had && r.code(t) == 104:
					case !had && r.code(t) == 103:
					default:
						t.Errorf("ADD %s dev:%d: %s (model %v)", id, amount, r.stdout, prev)
					}
					continue
				}
				mu.Lock()
				for _, dev := range model[w][id] {
					delete(heldBy[dev], id)
				}
				mu.Unlock()
				r := n.run("generic", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+id)
				if _, had := model[w][id]; r.status != 0 || (had && r.stdout != "") || (!had && r.code(t) != 5) {
					t.Errorf("DEL %s (held %v): %s", id, had, r.stdout)
				}
				delete(model[w], id)
			}
		})
	}
	wg.Wait()
	recs := n.records("generic")
	want := 0
	for w := range model {
		for id, devs := range model[w] {
			want++
			var got []string
			if r := recs[id]; r != nil {
				for _, al := range r.Allocations {
					got = append(got, al.HandedOut()...)
				}
			}
			if strings.Join(got, " ") != strings.Join(devs, " ") {
				t.Errorf("store for %s = %v, model %v", id, got, devs)
			}
		}
	}
	if len(recs) != want {
		t.Errorf("store has %d records, model %d", len(recs), want)
	}
}

// cdictl validate places the generic plugin's refusals at the member in
// the config file: a bad glob, an unknown member, contradictory rules.
func TestGenericValidatePlacesProblems(t *testing.T) {
	head := "{\n  \"cdiVersion\": \"0.0.2\",\n  \"name\": \"x\",\n  \"type\": \"%s\",\n  \"plugin\": \"generic\",\n  \"args\": {\"rules\": [\n"
	confs := map[string]string{
		"glob.d/g.conf":  fmt.Sprintf(head, "glob") + "    {\"paths\": [\"/dev/kvm\", \"/dev/tty[0-\"]}\n  ]}\n}\n",
		"typo.d/g.conf":  fmt.Sprintf(head, "typo") + "    {\"paths\": [\"/dev/kvm\"],\n     \"share\": 3}\n  ]}\n}\n",
		"twice.d/g.conf": fmt.Sprintf(head, "twice") + "    {\"paths\": [\"/dev/fuse\"]},\n    {\"paths\": [\"/dev/fuse\"], \"shares\": 2}\n  ]}\n}\n",
	}
	n := newCtlNode(t, fixture.Host{Misc: []fixture.Misc{fixture.KVM, fixture.FUSE}}, confs)
	r := n.ctl("validate", "-o", "table")
	for _, want := range []string{
		filepath.Join(n.conf, "glob.d/g.conf") + `:7:28: plugin generic refuses it: error: Invalid configuration: args.rules[0].paths[1]: "/dev/tty[0-" is not a valid glob`,
		filepath.Join(n.conf, "typo.d/g.conf") + `:8:15: plugin generic refuses it: error: Invalid configuration: args.rules[0].share: unknown field "share"; did you mean "shares"?`,
		filepath.Join(n.conf, "twice.d/g.conf") + `:8:16: plugin generic refuses it: error: Invalid configuration: args.rules[1].paths[0]: selects the same devices as rules[0].paths[0]`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("validate lacks\n%s\n%s", want, r.stdout)
		}
	}
	if r.status != 1 {
		t.Errorf("validate: status %d", r.status)
	}
}

// The device-plugin mode offers a shared unit once per share: kvm with 3
// shares is three device ids, kvm, kvm-s1, kvm-s2; three pods each get
// one and /dev/kvm; a fourth allocation fails, as the plugin's 103.
func TestKubeletPluginGenericShares(t *testing.T) {
	needRealNodes(t)
	conf := `{"cdiVersion":"0.0.2","name":"kvm","type":"kvm","plugin":"generic","args":{"rules":[{"paths":["/dev/kvm"],"shares":3}]}}`
	n := newCtlNode(t, fixture.Host{Misc: []fixture.Misc{fixture.KVM}}, map[string]string{"kvm.d/generic.conf": conf})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, first, logs := startKVMDevicePlugin(ctx, t, n)
	var ids []string
	for _, d := range first.Devices {
		if d.Health == api.Healthy {
			ids = append(ids, d.ID)
		}
	}
	if strings.Join(ids, " ") != "kvm kvm-s1 kvm-s2" {
		t.Fatalf("devices %v", first.Devices)
	}
	for _, id := range ids {
		resp, err := c.Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{id}}}})
		if err != nil {
			t.Fatalf("Allocate %s: %v\n%s", id, err, logs.String())
		}
		if cdi := resp.ContainerResponses[0].CdiDevices; len(cdi) != 1 {
			t.Fatalf("Allocate %s: CDI devices %v", id, cdi)
		}
	}
	if _, err := c.Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{"kvm-s1", "kvm-s2"}}}}); err == nil || !strings.Contains(err.Error(), "103") && !strings.Contains(err.Error(), "held by another request") {
		t.Fatalf("a fourth allocation: %v", err)
	}
	recs := n.records("generic")
	if len(recs) != 3 {
		t.Fatalf("records %v", recs)
	}
	checkShares(t, recs, map[string]int{"kvm": 3})
}

// startKVMDevicePlugin starts cdi-kubelet-plugin device-plugin on n's
// configs beside a test kubelet, and returns the client of the plugin
// that registered, its first ListAndWatch answer and its log.
func startKVMDevicePlugin(ctx context.Context, t *testing.T, n *ctlNode) (api.DevicePluginClient, *api.ListAndWatchResponse, *kubelettest.Buffer) {
	t.Helper()
	k := kubelettest.Start(t)
	cmd := exec.Command(filepath.Join(binDir, "cdi-kubelet-plugin"), "device-plugin",
		"--conf-dir", n.conf, "--kubelet-dir", k.Root, "--cdi-spec-dir", filepath.Join(t.TempDir(), "cdi"), "--resource-prefix", "example.com")
	cmd.Env = []string{"CDI_PATH=" + binDir, "CDI_STATE_DIR=" + n.state, "CDI_HOST_ROOT=" + n.root}
	logs := &kubelettest.Buffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var reg *api.RegisterRequest
	select {
	case reg = <-k.Registrations:
	case <-time.After(time.Minute):
		t.Fatalf("no registration within a minute:\n%s", logs.String())
	}
	c := k.Dial(reg.Endpoint)
	stream, err := c.ListAndWatch(ctx, &api.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return c, first, logs
}
