package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/test/fixture"
)

// specTTYHost has tty0..tty44: with 12 reserved, 32 usable, as in the spec's
// INFO example 2.
var specTTYHost = fixture.Host{TTYs: map[string]int{"tty": 45, "ttyS": 4}}

func readConf(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The spec's examples that concern generic-tty and the generic errors, run
// in sequence on one node as the spec tells them.
func TestTTYSpecExamples(t *testing.T) {
	n := newNode(t, specTTYHost)
	conf := readConf(t, "tty.conf")
	n.goldenSteps(t, "generic-tty", conf, []goldenStep{
		{"version", env("CDI_COMMAND=VERSION"), 0},
		{"tty_info", env("CDI_COMMAND=INFO"), 0},
		{"tty_add", env("CDI_VERSION=0.0.1", "CDI_COMMAND=ADD", "CDI_REQUEST=tty:3", "CDI_REQUEST_ID=7890"), 0},
		{"tty_add", env("CDI_VERSION=0.0.1", "CDI_COMMAND=ADD", "CDI_REQUEST=tty:3", "CDI_REQUEST_ID=7890"), 0}, // replay
		{"tty_info", env("CDI_COMMAND=INFO"), 0}, // capacity, not free count
		{"error_version", env("CDI_VERSION=0.999", "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=1"), 1},
		{"error_version", env("CDI_VERSION=0.999"), 1}, // exactly the spec's example: no command at all
		{"error_command", env("CDI_VERSION=0.0.1", "CDI_COMMAND=MYCMD"), 1},
		{"tty_error_subtype", env("CDI_VERSION=0.0.1", "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1,tty-memory:2048Mi", "CDI_REQUEST_ID=3456"), 1},
		{"del_ok", env("CDI_VERSION=0.0.1", "CDI_COMMAND=DEL", "CDI_REQUEST_ID=7890"), 0},
		{"del_unknown", env("CDI_VERSION=0.0.1", "CDI_COMMAND=DEL", "CDI_REQUEST_ID=3456"), 0},
		{"del_unknown", env("CDI_VERSION=0.0.1", "CDI_COMMAND=DEL", "CDI_REQUEST_ID=7890"), 0},                  // already freed
		{"tty_add", env("CDI_VERSION=0.0.1", "CDI_COMMAND=ADD", "CDI_REQUEST=tty:3", "CDI_REQUEST_ID=7890"), 0}, // freed devices come back
	})
}

func TestTTYErrors(t *testing.T) {
	n := newNode(t, specTTYHost)
	conf := readConf(t, "tty.conf")
	add := func(extra ...string) []string {
		return append(env("CDI_VERSION=0.0.2", "CDI_COMMAND=ADD"), extra...)
	}
	tests := []struct {
		name   string
		conf   string
		env    []string
		status int
		code   int
	}{
		{"unknown arg", `{"cdiVersion":"0.0.1","name":"t","type":"tty","plugin":"generic-tty","args":{"num_system_reservd":1}}`, add("CDI_REQUEST=tty:1", "CDI_REQUEST_ID=a"), 1, 101},
		{"negative reserved", `{"cdiVersion":"0.0.1","name":"t","type":"tty","plugin":"generic-tty","args":{"num_system_reserved":-1}}`, add("CDI_REQUEST=tty:1", "CDI_REQUEST_ID=a"), 1, 101},
		{"bad pattern", `{"cdiVersion":"0.0.1","name":"t","type":"tty","plugin":"generic-tty","args":{"pattern":"tty[0-9]"}}`, env("CDI_COMMAND=INFO"), 1, 101},
		{"config version", `{"cdiVersion":"1.0.0","name":"t","type":"tty","plugin":"generic-tty"}`, env("CDI_COMMAND=INFO"), 1, 2},
		{"not json", `tty please`, env("CDI_COMMAND=INFO"), 1, 101},
		{"amount zero", conf, add("CDI_REQUEST=tty:0", "CDI_REQUEST_ID=a"), 1, 102},
		{"amount leading zero", conf, add("CDI_REQUEST=tty:01", "CDI_REQUEST_ID=a"), 1, 102},
		{"amount overflow", conf, add("CDI_REQUEST=tty:2147483648", "CDI_REQUEST_ID=a"), 1, 102},
		{"duplicate spec", conf, add("CDI_REQUEST=tty:1,tty:1", "CDI_REQUEST_ID=a"), 1, 102},
		{"other type", conf, add("CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=a"), 1, 4},
		{"id too long", conf, add("CDI_REQUEST=tty:1", "CDI_REQUEST_ID="+strings.Repeat("a", 65)), 1, 102},
		{"id leading hyphen", conf, add("CDI_REQUEST=tty:1", "CDI_REQUEST_ID=-a"), 1, 102},
		{"numa garbage", conf, add("CDI_REQUEST=tty:1", "CDI_REQUEST_ID=a", "CDI_REQUEST_NUMA_LOCALITY=zero"), 1, 102},
		{"too many", conf, add("CDI_REQUEST=tty:33", "CDI_REQUEST_ID=a"), 1, 103},
		{"DEL bad id exits 0", conf, env("CDI_COMMAND=DEL", "CDI_REQUEST_ID=a_b"), 0, 102},
		{"DEL bad config exits 0", "[", env("CDI_COMMAND=DEL", "CDI_REQUEST_ID=a"), 0, 101},
		{"DEL bad version exits 0", conf, env("CDI_COMMAND=DEL", "CDI_VERSION=2", "CDI_REQUEST_ID=a"), 0, 1},
		{"GC without valid list", conf, env("CDI_COMMAND=GC"), 1, 102},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := n.run("generic-tty", tt.conf, tt.env...)
			if r.status != tt.status || r.code(t) != tt.code {
				t.Fatalf("status %d code %d, want %d %d\n%s%s", r.status, r.code(t), tt.status, tt.code, r.stdout, r.stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(n.state, "generic-tty.db")); err == nil {
		recs := n.records("generic-tty")
		if len(recs) != 0 {
			t.Fatalf("failed ADDs left records: %v", recs)
		}
	}
}

func TestTTYFamiliesSortNumerically(t *testing.T) {
	n := newNode(t, fixture.Host{TTYs: map[string]int{"tty": 3, "ttyUSB": 12, "ttyS": 2}})
	conf := `{"cdiVersion":"0.0.2","name":"usb","type":"serial","plugin":"generic-tty","args":{"pattern":"ttyUSB*","num_system_reserved":1}}`
	if got := n.run("generic-tty", conf, "CDI_COMMAND=INFO").obj(t)["serial"]; got != float64(11) {
		t.Fatalf("INFO serial = %v, want 11", got)
	}
	r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=serial:10", "CDI_REQUEST_ID=u1")
	got := r.devices(t)
	var want []string
	for i := 1; i <= 10; i++ {
		want = append(want, fmt.Sprintf("/dev/ttyUSB%d", i))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	r = n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=serial:1", "CDI_REQUEST_ID=u2")
	if d := r.devices(t); len(d) != 1 || d[0] != "/dev/ttyUSB11" {
		t.Fatalf("got %v", d)
	}
	// The default family is exactly "tty": no ttyS or ttyUSB, and never tty0.
	def := `{"cdiVersion":"0.0.2","name":"vt","type":"tty","plugin":"generic-tty"}`
	if d := n.run("generic-tty", def, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:2", "CDI_REQUEST_ID=v").devices(t); strings.Join(d, " ") != "/dev/tty1 /dev/tty2" {
		t.Fatalf("got %v", d)
	}
}

// A tty whose /dev node is missing is neither counted nor handed out.
func TestTTYMissingNode(t *testing.T) {
	n := newNode(t, fixture.Host{TTYs: map[string]int{"tty": 16}})
	if err := os.Remove(filepath.Join(n.root, "dev", "tty13")); err != nil {
		t.Fatal(err)
	}
	conf := readConf(t, "tty.conf")
	if got := n.run("generic-tty", conf, "CDI_COMMAND=INFO").obj(t)["tty"]; got != float64(2) {
		t.Fatalf("INFO = %v, want 2", got)
	}
	d := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:2", "CDI_REQUEST_ID=x").devices(t)
	if strings.Join(d, " ") != "/dev/tty14 /dev/tty15" {
		t.Fatalf("got %v", d)
	}
}

// Many plugin processes at once, more requests than ttys: every success has
// its own tty, every failure is 103 and holds nothing, and the store matches
// the successes exactly.
func TestTTYConcurrentProcesses(t *testing.T) {
	n := newNode(t, fixture.Host{TTYs: map[string]int{"tty": 33}}) // 20 usable
	conf := readConf(t, "tty.conf")
	const procs = 40
	results := make([]result, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() {
			results[i] = n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", fmt.Sprintf("CDI_REQUEST_ID=pod%d", i))
		})
	}
	wg.Wait()
	owner := map[string]string{}
	ok := 0
	for i, r := range results {
		id := fmt.Sprintf("pod%d", i)
		if r.status != 0 {
			if c := r.code(t); c != 103 {
				t.Fatalf("%s: code %d\n%s%s", id, c, r.stdout, r.stderr)
			}
			continue
		}
		ok++
		d := r.devices(t)
		if len(d) != 1 {
			t.Fatalf("%s: %v", id, d)
		}
		if prev, dup := owner[d[0]]; dup {
			t.Fatalf("%s handed to %s and %s", d[0], prev, id)
		}
		owner[d[0]] = id
	}
	if ok != 20 {
		t.Fatalf("%d successes, want 20", ok)
	}
	recs := n.records("generic-tty")
	if len(recs) != ok {
		t.Fatalf("store holds %d records, %d successes", len(recs), ok)
	}
	for dev, id := range owner {
		r := recs[id]
		if r == nil || r.Devices()[0].Nodes[0] != dev {
			t.Fatalf("store record of %s = %+v, want %s", id, r, dev)
		}
	}
}

// A second process holding the store's lock makes ADD wait, boundedly, and
// fail with 106; DEL reports the same and exits 0.
func TestTTYLockHeldByAnotherProcess(t *testing.T) {
	n := newNode(t, specTTYHost)
	conf := readConf(t, "tty.conf")
	path := store.Path(n.state, "generic-tty")
	if err := os.MkdirAll(n.state, 0o700); err != nil {
		t.Fatal(err)
	}
	holder := exec.Command(os.Args[0])
	holder.Env = append(os.Environ(), "CDI_E2E_HOLD_LOCK="+path)
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := out.Read(buf); err != nil || string(buf) != "locked\n" {
		t.Fatalf("holder: %q %v", buf, err)
	}
	r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=a", "CDI_LOCK_TIMEOUT=300ms")
	if r.status != 1 || r.code(t) != 106 || !strings.Contains(r.stdout, "another invocation") {
		t.Fatalf("ADD under lock: %d\n%s", r.status, r.stdout)
	}
	r = n.run("generic-tty", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=a", "CDI_LOCK_TIMEOUT=300ms")
	if r.status != 0 || r.code(t) != 106 {
		t.Fatalf("DEL under lock: %d\n%s", r.status, r.stdout)
	}
	stdin.Close()
	if err := holder.Wait(); err != nil {
		t.Fatal(err)
	}
	// Once released, the same ADD goes through.
	if r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=a"); r.status != 0 {
		t.Fatalf("after release: %s", r.stdout)
	}
}

// A corrupt store is reported as 106 and never overwritten.
func TestTTYCorruptStore(t *testing.T) {
	n := newNode(t, specTTYHost)
	conf := readConf(t, "tty.conf")
	if err := os.MkdirAll(n.state, 0o700); err != nil {
		t.Fatal(err)
	}
	path := store.Path(n.state, "generic-tty")
	junk := []byte(strings.Repeat("this is not a bbolt file\n", 2000))
	if err := os.WriteFile(path, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=a")
	if r.status != 1 || r.code(t) != 106 {
		t.Fatalf("ADD: %d %s", r.status, r.stdout)
	}
	r = n.run("generic-tty", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=a")
	if r.status != 0 || r.code(t) != 106 {
		t.Fatalf("DEL: %d %s", r.status, r.stdout)
	}
	// INFO reports capacity from the host alone and does not need the store.
	if r := n.run("generic-tty", conf, "CDI_COMMAND=INFO"); r.status != 0 {
		t.Fatalf("INFO: %s", r.stdout)
	}
	after, _ := os.ReadFile(path)
	if string(after) != string(junk) {
		t.Fatal("corrupt store was modified")
	}
	// A state path that is a directory is reported the same way.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=a"); r.code(t) != 106 {
		t.Fatalf("ADD on directory: %s", r.stdout)
	}
}

// Several resource-specs under one id, replay and conflict.
func TestTTYReplayAndConflict(t *testing.T) {
	n := newNode(t, specTTYHost)
	conf := readConf(t, "tty.conf")
	first := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:2", "CDI_REQUEST_ID=p")
	again := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:2", "CDI_REQUEST_ID=p")
	if first.stdout != again.stdout || first.status != 0 {
		t.Fatalf("replay differs:\n%s\n%s", first.stdout, again.stdout)
	}
	if r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:3", "CDI_REQUEST_ID=p"); r.code(t) != 104 {
		t.Fatalf("conflict: %s", r.stdout)
	}
	if r := n.run("generic-tty", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=p"); r.stdout != "" || r.status != 0 {
		t.Fatalf("DEL: %s", r.stdout)
	}
	if recs := n.records("generic-tty"); len(recs) != 0 {
		t.Fatalf("records left: %v", recs)
	}
}
