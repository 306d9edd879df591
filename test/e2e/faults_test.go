package e2e

import (
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

	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/test/fixture"
)

// Plugin processes are killed with SIGKILL at random moments while others
// keep allocating and freeing, publishing CDI specs. At least
// minKillsInStore of the kills must land while the process has the store
// open and locked (inStore), or the test proves nothing about a
// transaction cut short; on a slow machine it runs more rounds until
// they have. Afterwards cdictl
// check finds the store sound, the store opens, no device is held twice,
// every record's devices exist; the next writes sweep the temporary files
// the killed processes left, and rewrite each live id's spec from its
// record; DEL of every surviving id frees everything.
func TestKillDuringAddDel(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	n := newNode(t, eightGPUs())
	specDir := filepath.Join(t.TempDir(), "cdi")
	conf := drmConf(`{"cdi_spec":{"kind":"example.com/gpu","dir":"` + specDir + `"}}`)
	bin := filepath.Join(binDir, "drm")
	db := store.Path(n.state, "drm")
	const workers, rounds, maxRounds, minKillsInStore = 4, 250, 2000, 40
	rng := rand.New(rand.NewPCG(1, 2))
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
				if i%2 == 0 {
					cmdEnv = append(cmdEnv, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1")
				} else {
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
					// Stopped, the process cannot close the store
					// between the look and the kill.
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
	litter := n.litter(t, specDir)
	t.Logf("%d of %d processes killed, %d of them with the store open; %d temporary files left", killed, started, inTx, len(litter))
	if inTx < minKillsInStore {
		t.Errorf("only %d of %d kills landed with the store open, want at least %d: the test did not cut transactions short", inTx, killed, minKillsInStore)
	}
	n.checkStores(t)
	recs := n.records("drm") // opens the store and checks the index
	for id, r := range recs {
		for _, d := range r.Devices() {
			if _, err := os.Stat(filepath.Join(n.root, d.Nodes[0])); err != nil {
				t.Errorf("%s holds %s, which does not exist", id, d.Nodes[0])
			}
		}
	}
	// The next writes, once the litter is stale, leave none, and every
	// live id's spec names what its record holds.
	old := time.Now().Add(-time.Hour)
	for _, p := range litter {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	valid := "none"
	if len(recs) > 0 {
		valid = strings.Join(slices.Collect(maps.Keys(recs)), ",")
	}
	if r := n.run("drm", conf, "CDI_COMMAND=GC", "CDI_VALID_REQUEST_IDS="+valid); r.status != 0 || strings.Contains(r.stdout, "freed\": [\"") {
		t.Fatalf("GC keeping every id: %s", r.stdout)
	}
	for id := range recs {
		if r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID="+id); r.status != 0 {
			t.Fatalf("replay %s: %s", id, r.stdout)
		}
	}
	if left := n.litter(t, specDir); len(left) != 0 {
		t.Errorf("litter left after the sweep: %v", left)
	}
	checkSpecs(t, specDir, recs)
	for id := range recs {
		if r := n.run("drm", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+id); r.status != 0 || r.stdout != "" {
			t.Fatalf("DEL %s: %s", id, r.stdout)
		}
	}
	if recs := n.records("drm"); len(recs) != 0 {
		t.Fatalf("left after DEL of every id: %v", recs)
	}
	if got := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:8", "CDI_REQUEST_ID=all"); got.status != 0 {
		t.Fatalf("not every GPU is free again: %s", got.stdout)
	}
	n.checkStores(t)
}

// inStore reports whether process pid has the store at path open and
// locked: between Open and Close, around its one transaction. The
// store's flock shows in /proc/<pid>/fdinfo of the descriptor that holds
// it.
func inStore(pid int, path string) bool {
	dir := fmt.Sprintf("/proc/%d", pid)
	fds, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if target, err := os.Readlink(dir + "/fd/" + fd.Name()); err != nil || target != path {
			continue
		}
		info, err := os.ReadFile(dir + "/fdinfo/" + fd.Name())
		if err == nil && strings.Contains(string(info), " FLOCK ") {
			return true
		}
	}
	return false
}

// litter lists the temporary files killed writers leave: ".tmp-*" specs in
// specDir and "<plugin>.db.new-*" stores in the state directory.
func (n *node) litter(t *testing.T, specDir string) []string {
	t.Helper()
	specs, _ := filepath.Glob(filepath.Join(specDir, ".tmp-*"))
	stores, _ := filepath.Glob(filepath.Join(n.state, "*.db.new-*"))
	return append(specs, stores...)
}

// checkStores runs cdictl check on the node's state directory and fails
// unless every store is sound.
func (n *node) checkStores(t *testing.T) {
	t.Helper()
	r := runArgs(t, filepath.Join(binDir, "cdictl"), []string{"check", "-o", "json"}, []string{"CDI_STATE_DIR=" + n.state})
	if r.status != 0 || !strings.Contains(r.stdout, `"problems": []`) {
		t.Fatalf("cdictl check: status %d\n%s%s", r.status, r.stdout, r.stderr)
	}
}

// checkSpecs asserts that the spec directory holds exactly one spec per
// record, naming the record's nodes.
func checkSpecs(t *testing.T, dir string, recs map[string]*store.Record) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "example.com-gpu_*.json"))
	if len(files) != len(recs) {
		t.Errorf("%d spec files for %d records", len(files), len(recs))
	}
	for id, r := range recs {
		spec, _ := filepath.Glob(filepath.Join(dir, "example.com-gpu_"+id+"_drm-*.json"))
		if len(spec) != 1 {
			t.Errorf("spec files of %s: %v", id, spec)
			continue
		}
		got := specNodes(t, spec[0])
		var want []string
		for _, a := range r.Allocations {
			want = append(want, a.HandedOut()...)
		}
		if !slices.Equal(got, want) {
			t.Errorf("spec of %s names %v, its record %v", id, got, want)
		}
	}
}

// Workers own disjoint request-ids and run random ADD/DEL/INFO against a
// model of what each id holds; every answer is checked against the model,
// and the store against the model at the end. A device counts as held from
// the moment its ADD answered until its DEL starts, so a device handed to
// another id inside that window is a double hand-out by the store.
func TestInterleavingAgainstModel(t *testing.T) {
	n := newNode(t, fixture.Host{TTYs: map[string]int{"tty": 45}}) // 32 usable
	conf := readConf(t, "tty.conf")
	const workers, steps, capacity = 4, 40, 32
	var mu sync.Mutex
	heldBy := map[string]string{} // device → id, across workers
	model := make([]map[string][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		model[w] = map[string][]string{}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range steps {
				id := fmt.Sprintf("w%d-%d", w, rng.IntN(3))
				switch op := rng.IntN(5); {
				case op < 2:
					amount := 1 + rng.IntN(4)
					r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", fmt.Sprintf("CDI_REQUEST=tty:%d", amount), "CDI_REQUEST_ID="+id)
					prev, had := model[w][id]
					switch {
					case r.status == 0:
						d := r.devices(t)
						if had && strings.Join(d, " ") != strings.Join(prev, " ") {
							t.Errorf("%s replay changed devices: %v then %v", id, prev, d)
						}
						if len(d) != amount {
							if !had {
								t.Errorf("%s got %d devices for %d", id, len(d), amount)
							}
						}
						mu.Lock()
						for _, dev := range d {
							if h, ok := heldBy[dev]; ok && h != id {
								t.Errorf("double hand-out: ADD gave %s to %s, but %s holds it and no DEL of %s had started", dev, id, h, h)
							}
							heldBy[dev] = id
						}
						mu.Unlock()
						model[w][id] = d
					case had && r.code(t) == 104 && len(prev) != amount:
					case !had && r.code(t) == 103:
					default:
						t.Errorf("ADD %s tty:%d: %s (model %v)", id, amount, r.stdout, prev)
					}
				case op < 4:
					// The devices may go to another worker as soon as
					// DEL commits, before it returns: release them in
					// the model first.
					mu.Lock()
					for _, dev := range model[w][id] {
						delete(heldBy, dev)
					}
					mu.Unlock()
					r := n.run("generic-tty", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+id)
					_, had := model[w][id]
					if r.status != 0 || (had && r.stdout != "") || (!had && r.code(t) != 5) {
						t.Errorf("DEL %s (held %v): %s", id, had, r.stdout)
					}
					delete(model[w], id)
				default:
					if got := n.run("generic-tty", conf, "CDI_COMMAND=INFO").obj(t)["tty"]; got != float64(capacity) {
						t.Errorf("INFO = %v", got)
					}
				}
			}
		})
	}
	wg.Wait()
	recs := n.records("generic-tty")
	want := 0
	for w := range model {
		for id, devs := range model[w] {
			want++
			r := recs[id]
			var got []string
			if r != nil {
				for _, d := range r.Devices() {
					got = append(got, d.Nodes...)
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

// Trouble with the state directory or the disk: clear 106 errors, DEL exit
// 0, and nothing half-written.
func TestDiskTrouble(t *testing.T) {
	conf := readConf(t, "tty.conf")
	add := []string{"CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=a"}
	del := []string{"CDI_COMMAND=DEL", "CDI_REQUEST_ID=a"}
	check := func(t *testing.T, n *node) {
		t.Helper()
		if r := n.run("generic-tty", conf, add...); r.status != 1 || r.code(t) != 106 {
			t.Fatalf("ADD: %d %s", r.status, r.stdout)
		}
		if r := n.run("generic-tty", conf, del...); r.status != 0 || (r.stdout != "" && r.code(t) != 106 && r.code(t) != 5) {
			t.Fatalf("DEL: %d %s", r.status, r.stdout)
		}
	}
	t.Run("state dir not creatable", func(t *testing.T) {
		n := newNode(t, specTTYHost)
		if err := os.WriteFile(n.state, []byte("a file where a directory should be"), 0o600); err != nil {
			t.Fatal(err)
		}
		n.state = filepath.Join(n.state, "sub")
		check(t, n)
	})
	t.Run("read-only state dir", func(t *testing.T) {
		n := newNode(t, specTTYHost)
		if err := os.MkdirAll(n.state, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount(n.state, n.state, "", syscall.MS_BIND, ""); err != nil {
			t.Skipf("cannot bind-mount here (%v); needs root", err)
		}
		defer syscall.Unmount(n.state, syscall.MNT_DETACH)
		if err := syscall.Mount("", n.state, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			t.Skipf("cannot remount read-only: %v", err)
		}
		check(t, n)
	})
	t.Run("full file system", func(t *testing.T) {
		n := newNode(t, specTTYHost)
		if err := os.MkdirAll(n.state, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", n.state, "tmpfs", 0, "size=8k,mode=0700"); err != nil {
			t.Skipf("cannot mount a small tmpfs here (%v); needs root", err)
		}
		defer syscall.Unmount(n.state, syscall.MNT_DETACH)
		// Too small to create the store: 106, and no half-made file.
		check(t, n)
		if _, err := os.Stat(store.Path(n.state, "generic-tty")); err == nil {
			t.Fatal("a half-initialised store file was left behind")
		}
	})
	t.Run("file system fills up", func(t *testing.T) {
		n := newNode(t, specTTYHost)
		if err := os.MkdirAll(n.state, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", n.state, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
			t.Skipf("cannot mount a small tmpfs here (%v); needs root", err)
		}
		defer syscall.Unmount(n.state, syscall.MNT_DETACH)
		if r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=first"); r.status != 0 {
			t.Fatalf("first ADD: %s", r.stdout)
		}
		// Fill the rest of the file system, then try to allocate many ids.
		junk := filepath.Join(n.state, "junk")
		f, err := os.Create(junk)
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := f.Write(make([]byte, 4096)); err != nil {
				break
			}
		}
		f.Close()
		failed := 0
		for i := range 20 {
			r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", fmt.Sprintf("CDI_REQUEST_ID=p%d", i))
			if r.status != 0 {
				if r.code(t) != 106 {
					t.Fatalf("ADD on a full disk: %s", r.stdout)
				}
				failed++
			}
		}
		// The disk was full: a plugin that answered success to every ADD
		// swallowed ENOSPC (or never wrote its store).
		if failed == 0 {
			t.Fatal("every ADD on a full disk succeeded: 20 new records fit in no free space")
		}
		if r := n.run("generic-tty", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=first"); r.status != 0 {
			t.Fatalf("DEL: %s", r.stdout)
		}
		// The store is intact and consistent; with room again, ADD works.
		n.records("generic-tty")
		if err := os.Remove(junk); err != nil {
			t.Fatal(err)
		}
		if r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=later"); r.status != 0 {
			t.Fatalf("ADD after freeing space: %s", r.stdout)
		}
	})
}

// Trouble in sysfs: each is a skipped device or a clear error, never a
// panic.
func TestSysfsTrouble(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(root string) error
		info   int
	}{
		{"numa_node garbage", func(root string) error {
			return os.WriteFile(filepath.Join(root, "sys/devices/pci0000:10/0000:10:00.0/numa_node"), []byte("banana\n"), 0o644)
		}, 8},
		{"vendor unreadable", func(root string) error {
			p := filepath.Join(root, "sys/devices/pci0000:11/0000:11:00.0/vendor")
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Mkdir(p, 0o755) // reading a directory fails
		}, 3},
		{"dangling class link", func(root string) error {
			return os.RemoveAll(filepath.Join(root, "sys/devices/pci0000:12"))
		}, 7},
		{"device node vanished", func(root string) error {
			for _, p := range []string{"dev/dri/card3", "dev/dri/renderD131"} {
				if err := os.Remove(filepath.Join(root, p)); err != nil {
					return err
				}
			}
			return nil
		}, 7},
		{"uevent without DEVNAME", func(root string) error {
			return os.WriteFile(filepath.Join(root, "sys/devices/pci0000:10/0000:10:00.0/drm/card0/uevent"), []byte("MAJOR=226\n"), 0o644)
		}, 8},
		{"no drm class at all", func(root string) error {
			return os.RemoveAll(filepath.Join(root, "sys/class/drm"))
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, eightGPUs())
			if err := tt.break_(n.root); err != nil {
				t.Fatal(err)
			}
			args := `{}`
			if tt.name == "vendor unreadable" {
				args = `{"vendorid_whitelist":["0x10de"]}`
			}
			r := n.run("drm", drmConf(args), "CDI_COMMAND=INFO")
			if r.status != 0 || r.obj(t)["gpu"] != float64(tt.info) {
				t.Fatalf("INFO: %d %s %s", r.status, r.stdout, r.stderr)
			}
			r = n.run("drm", drmConf(args), "CDI_COMMAND=ADD", fmt.Sprintf("CDI_REQUEST=gpu:%d", max(tt.info, 1)), "CDI_REQUEST_ID=a")
			if tt.info == 0 {
				if r.code(t) != 103 {
					t.Fatalf("ADD: %s", r.stdout)
				}
				return
			}
			if r.status != 0 || strings.Contains(r.stderr, "panic") {
				t.Fatalf("ADD: %d %s %s", r.status, r.stdout, r.stderr)
			}
		})
	}
}
