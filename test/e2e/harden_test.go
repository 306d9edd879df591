package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/test/fixture"
)

// Hostile input the plugins must refuse (docs/reliability.md): each test
// here failed against the binaries before the hardening it covers.

var (
	ttyAdd = []string{"CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=a"}
	ttyDel = []string{"CDI_COMMAND=DEL", "CDI_REQUEST_ID=a"}
)

// tree lists every path under dir with its type, size and link target: a
// refused command must leave it exactly as it was.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		target, _ := os.Readlink(p)
		fmt.Fprintf(&b, "%s %v %d %s %d\n", p, fi.Mode(), fi.Size(), target, fi.ModTime().UnixNano())
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return b.String()
}

// refused runs ADD, INFO and DEL and expects 106 from each (DEL exits 0),
// with details containing want, and nothing changed under top.
func (n *node) refused(t *testing.T, conf, top, want string) {
	t.Helper()
	before := tree(t, top)
	for _, cmd := range [][]string{ttyAdd, {"CDI_COMMAND=INFO"}, ttyDel} {
		r := n.run("generic-tty", conf, cmd...)
		status := 1
		if cmd[0] == "CDI_COMMAND=DEL" {
			status = 0
		}
		if r.status != status || r.code(t) != 106 || !strings.Contains(r.stdout, want) {
			t.Fatalf("%s: status %d, want 106 saying %q:\n%s%s", cmd[0], r.status, want, r.stdout, r.stderr)
		}
	}
	if after := tree(t, top); after != before {
		t.Fatalf("a refused command changed the tree:\n%s\nwas\n%s", after, before)
	}
}

// The store file and the state directory are never reached
// through a symbolic link, and must be a regular file and a directory of
// the user the plugin runs as.
func TestStoreLocationRefused(t *testing.T) {
	conf := readConf(t, "tty.conf")
	tests := []struct {
		name  string
		root  bool // needs root to give files to another user
		setup func(t *testing.T, n *node, top string)
		want  string
	}{
		{"store links to a missing file", false, func(t *testing.T, n *node, top string) {
			mkdirMode(t, n.state, 0o700)
			symlinkT(t, filepath.Join(top, "elsewhere.db"), store.Path(n.state, "generic-tty"))
		}, "is a symbolic link"},
		{"store links to an empty file", false, func(t *testing.T, n *node, top string) {
			mkdirMode(t, n.state, 0o700)
			writeT(t, filepath.Join(top, "victim"), "", 0o600)
			symlinkT(t, filepath.Join(top, "victim"), store.Path(n.state, "generic-tty"))
		}, "is a symbolic link"},
		{"state dir is a link", false, func(t *testing.T, n *node, top string) {
			mkdirMode(t, filepath.Join(top, "real"), 0o700)
			symlinkT(t, filepath.Join(top, "real"), n.state)
		}, "is a symbolic link"},
		{"store is a FIFO", false, func(t *testing.T, n *node, top string) {
			mkdirMode(t, n.state, 0o700)
			if err := unix.Mkfifo(store.Path(n.state, "generic-tty"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"store owned by another user", true, func(t *testing.T, n *node, top string) {
			makeStore(t, n, conf)
			lchown(t, store.Path(n.state, "generic-tty"), 65534)
		}, "owned by uid 65534"},
		{"state dir owned by another user", true, func(t *testing.T, n *node, top string) {
			makeStore(t, n, conf)
			lchown(t, n.state, 65534)
		}, "owned by uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root && os.Geteuid() != 0 {
				t.Skip("needs root to give a file to another user (chown)")
			}
			n := newNode(t, specTTYHost)
			top := filepath.Dir(n.state)
			tt.setup(t, n, top)
			n.refused(t, conf, top, tt.want)
		})
	}
}

// As a user other than root: a plugin run by uid 65534 refuses
// a state directory that root owns, and one that others may write, and
// works in a directory of its own.
func TestStoreLocationAsNonRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the plugin as another user (SysProcAttr.Credential)")
	}
	n := newNode(t, specTTYHost)
	top := filepath.Dir(n.state)
	for _, d := range []string{filepath.Dir(top), top} { // t.TempDir makes them 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := readConf(t, "tty.conf")
	bin := nobodyCopy(t, "generic-tty")
	asNobody := func(state string, env ...string) result {
		cmd := exec.Command(bin)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		return run(t, cmd, conf, append([]string{"CDI_HOST_ROOT=" + n.root, "CDI_STATE_DIR=" + state}, env...))
	}
	mkdirMode(t, n.state, 0o755) // root's, readable by all
	before := tree(t, n.state)
	if r := asNobody(n.state, ttyAdd...); r.code(t) != 106 || !strings.Contains(r.stdout, "owned by uid 0, not by uid 65534") {
		t.Fatalf("ADD in root's dir: %s%s", r.stdout, r.stderr)
	}
	shared := filepath.Join(top, "shared")
	mkdirMode(t, shared, 0o777)
	lchown(t, shared, 65534)
	if r := asNobody(shared, ttyAdd...); r.code(t) != 106 || !strings.Contains(r.stdout, "chmod 0700") {
		t.Fatalf("ADD in a world-writable dir: %s%s", r.stdout, r.stderr)
	}
	if after := tree(t, n.state); after != before {
		t.Fatalf("root's state dir changed:\n%s", after)
	}
	if entries, _ := os.ReadDir(shared); len(entries) != 0 {
		t.Fatalf("written to the world-writable dir: %v", entries)
	}
	own := filepath.Join(top, "own")
	mkdirMode(t, own, 0o700)
	lchown(t, own, 65534)
	if r := asNobody(own, ttyAdd...); r.status != 0 {
		t.Fatalf("ADD in its own dir: %s%s", r.stdout, r.stderr)
	}
	var st unix.Stat_t
	if err := unix.Stat(store.Path(own, "generic-tty"), &st); err != nil || st.Uid != 65534 || st.Mode&0o777 != 0o600 {
		t.Fatalf("store: uid %d mode %o %v", st.Uid, st.Mode&0o777, err)
	}
}

// A state directory others may write is refused with advice, and
// relative roots are errors, not paths under the caller's directory.
func TestStateDirModeAndRelativeRoots(t *testing.T) {
	conf := readConf(t, "tty.conf")
	for _, mode := range []os.FileMode{0o777, 0o770, 0o702, 0o1777} {
		t.Run(fmt.Sprintf("%04o", mode), func(t *testing.T) {
			n := newNode(t, specTTYHost)
			mkdirMode(t, n.state, mode)
			n.refused(t, conf, filepath.Dir(n.state), "chmod 0700 "+n.state)
		})
	}
	n := newNode(t, specTTYHost)
	cwd := t.TempDir()
	for _, tt := range []struct {
		env  []string
		code int
	}{
		{[]string{"CDI_HOST_ROOT=" + n.root, "CDI_STATE_DIR=state"}, 106},
		{[]string{"CDI_HOST_ROOT=host", "CDI_STATE_DIR=" + n.state}, 101},
	} {
		for _, cmd := range [][]string{ttyAdd, {"CDI_COMMAND=INFO"}, ttyDel} {
			c := exec.Command(filepath.Join(binDir, "generic-tty"))
			c.Dir = cwd
			r := run(t, c, conf, append(tt.env, cmd...))
			if r.code(t) != tt.code || !strings.Contains(r.stdout, "not an absolute path") {
				t.Errorf("%v %s: %s", tt.env, cmd[0], r.stdout)
			}
		}
	}
	if entries, _ := os.ReadDir(cwd); len(entries) != 0 {
		t.Fatalf("a relative state dir was created: %v", entries)
	}
}

// An empty store file is damage. ADD and INFO fail with 106, DEL
// prints 106 and exits 0, and the file is left as it is.
func TestEmptyStoreIsDamage(t *testing.T) {
	n := newNode(t, specTTYHost)
	mkdirMode(t, n.state, 0o700)
	writeT(t, store.Path(n.state, "generic-tty"), "", 0o600)
	n.refused(t, readConf(t, "tty.conf"), n.state, "is empty")
}

// Arg and config names match exactly; another spelling or a
// repeated name is 101 naming it.
func TestNamesMatchExactly(t *testing.T) {
	n := newNode(t, specTTYHost)
	tty := func(args string) string {
		return `{"cdiVersion":"0.0.2","name":"t","type":"tty","plugin":"generic-tty","args":` + args + `}`
	}
	for conf, want := range map[string]string{
		tty(`{"num_system_reserved": 12, "NUM_SYSTEM_RESERVED": 0}`):                         `\"NUM_SYSTEM_RESERVED\" is not \"num_system_reserved\"`,
		tty(`{"num_system_reserved": 12, "num_system_reserved": 0}`):                         `\"num_system_reserved\" is given twice`,
		tty(`{"Pattern": "ttyS"}`):                                                           `\"Pattern\" is not \"pattern\"`,
		tty(`{"cdi_spec": {"Kind": "example.com/tty"}}`):                                     `cdi_spec.Kind: field \"Kind\" is not \"kind\"`,
		tty(`{"cdi_spec": {"kind": "example.com/tty", "DIR": "/x"}}`):                        `cdi_spec.DIR: field \"DIR\" is not \"dir\"`,
		`{"cdiVersion":"0.0.2","name":"t","type":"tty","Type":"gpu","plugin":"generic-tty"}`: `\"Type\" is not \"type\"`,
		`{"cdiVersion":"0.0.2","name":"t","type":"gpu","type":"tty","plugin":"generic-tty"}`: `\"type\" is given twice`,
	} {
		r := n.run("generic-tty", conf, ttyAdd...)
		if r.status != 1 || r.code(t) != 101 || !strings.Contains(r.stdout, want) {
			t.Errorf("%s:\n%s", conf, r.stdout)
		}
	}
	// The reserved tty1..tty12 stay reserved: nothing was handed out.
	if recs := storeRecords(t, n, "generic-tty"); len(recs) != 0 {
		t.Fatalf("allocated: %v", recs)
	}
	g := newNode(t, eightGPUs())
	if r := g.run("drm", drmConf(`{"Vendorid_Whitelist": ["0x10de"]}`), "CDI_COMMAND=INFO"); r.code(t) != 101 ||
		!strings.Contains(r.stdout, `\"Vendorid_Whitelist\" is not \"vendorid_whitelist\"`) {
		t.Fatalf("drm: %s", r.stdout)
	}
}

// storeRecords reads a store that may not exist yet.
func storeRecords(t *testing.T, n *node, plugin string) map[string]*store.Record {
	t.Helper()
	if _, err := os.Stat(store.Path(n.state, plugin)); os.IsNotExist(err) {
		return nil
	}
	return n.records(plugin)
}

// Every unusable CDI_LOCK_TIMEOUT is named in a warning on stderr
// and the default is used; plugins and cdictl parse it the same way.
func TestUnusableLockTimeoutWarns(t *testing.T) {
	n := newNode(t, specTTYHost)
	conf := readConf(t, "tty.conf")
	for _, v := range []string{"NaN", "1e-10", "Inf", "-1", "0", "soon", "25h"} {
		r := n.run("generic-tty", conf, "CDI_COMMAND=INFO", "CDI_LOCK_TIMEOUT="+v)
		if r.status != 0 || !strings.Contains(r.stderr, "generic-tty: warning: ignoring CDI_LOCK_TIMEOUT: \""+v+"\"") ||
			!strings.Contains(r.stderr, "waiting at most 10s") {
			t.Errorf("%s: status %d, stderr %q", v, r.status, r.stderr)
		}
		c := runArgs(t, filepath.Join(binDir, "cdictl"), []string{"ls", "-o", "json"},
			[]string{"CDI_STATE_DIR=" + n.state, "CDI_LOCK_TIMEOUT=" + v})
		if !strings.Contains(c.stderr, "CDI_LOCK_TIMEOUT") || !strings.Contains(c.stderr, v) {
			t.Errorf("cdictl ls, %s: status %d, stderr %q", v, c.status, c.stderr)
		}
	}
	if r := n.run("generic-tty", conf, "CDI_COMMAND=INFO", "CDI_LOCK_TIMEOUT=1.5"); r.stderr != "" {
		t.Errorf("a good value warned: %q", r.stderr)
	}
}

// CDI_COMMAND is matched ASCII case-insensitively only; Unicode
// letters that upper-case to ASCII ones are not commands.
func TestCommandMatchedASCIIOnly(t *testing.T) {
	n := newNode(t, specTTYHost)
	conf := readConf(t, "tty.conf")
	for _, cmd := range []string{"ınfo", "verſion", "ADĐ", "deL\u0307"} {
		r := n.run("generic-tty", conf, "CDI_COMMAND="+cmd)
		if r.status != 1 || r.code(t) != 3 || r.obj(t)["details"] != "Unsupported command: "+cmd {
			t.Errorf("%q: %d %s", cmd, r.status, r.stdout)
		}
	}
	if r := n.run("generic-tty", conf, "CDI_COMMAND=iNfO"); r.status != 0 {
		t.Errorf("iNfO: %s", r.stdout)
	}
}

// A /dev entry is handed out only when it is a character device
// with the numbers sysfs gives for it. INFO checks the type, which the
// directory listing tells for free; ADD also checks the numbers of the
// devices it chooses.
func TestOnlyRealDeviceNodesHandedOut(t *testing.T) {
	n := newNode(t, specTTYHost)
	conf := readConf(t, "tty.conf")
	dev := func(name string) string { return filepath.Join(n.root, "dev", name) }
	for _, name := range []string{"tty13", "tty14"} {
		if err := os.Remove(dev(name)); err != nil {
			t.Fatal(err)
		}
	}
	symlinkT(t, dev("tty99"), dev("tty13")) // dangling
	writeT(t, dev("tty14"), "", 0o666)      // a regular file
	want := []string{"/dev/tty15"}
	capacity := 30.0
	realNodes := fixture.NodesIn(n.root) == fixture.RealNodes
	if realNodes {
		// Numbers planted wrong: still counted by INFO, never handed out.
		if err := os.Remove(dev("tty15")); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(dev("tty15"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
		want = []string{"/dev/tty16"}
	}
	if got := n.run("generic-tty", conf, "CDI_COMMAND=INFO").obj(t)["tty"]; got != capacity {
		t.Fatalf("INFO = %v, want %v", got, capacity)
	}
	r := n.run("generic-tty", conf, ttyAdd...)
	if r.status != 0 || !slices.Equal(r.devices(t), want) {
		t.Fatalf("ADD: %s%s, want %v", r.stdout, r.stderr, want)
	}
	if realNodes && !strings.Contains(r.stderr, "not handing out tty15: /dev/tty15 is device 1:3, but sysfs says 4:15") {
		t.Errorf("no warning about tty15: %q", r.stderr)
	}
	var inv struct {
		Devices []struct {
			Key    string `json:"key"`
			Usable bool   `json:"usable"`
			Reason string `json:"reason"`
		} `json:"devices"`
	}
	if err := json.Unmarshal([]byte(n.run("generic-tty", conf, "CDI_COMMAND=DEVICES").stdout), &inv); err != nil {
		t.Fatal(err)
	}
	for _, d := range inv.Devices {
		if (d.Key == "tty13" || d.Key == "tty14" || d.Key == "tty15" && realNodes) && d.Usable {
			t.Errorf("DEVICES calls %s usable", d.Key)
		}
	}
}

// ADD, fresh or replayed, writes the request's spec from its
// committed record, whatever spec file an interrupted DEL or ADD left.
func TestSpecRewrittenFromRecord(t *testing.T) {
	n := newNode(t, specTTYHost)
	dir := filepath.Join(t.TempDir(), "cdi")
	conf := `{"cdiVersion":"0.0.2","name":"t","type":"tty","plugin":"generic-tty","args":{"num_system_reserved":12,"cdi_spec":{"kind":"example.com/tty","dir":"` + dir + `"}}}`
	makeStore(t, n, conf) // x holds tty13
	id := storeID(t, n)
	specOf := func(rid string) string { return filepath.Join(dir, "example.com-tty_"+rid+"_generic-tty-"+id+".json") }
	nodesIn := func(rid string) []string { return specNodes(t, specOf(rid)) }
	stale := func(rid string) {
		writeT(t, specOf(rid), `{"cdiVersion":"0.5.0","kind":"example.com/tty","devices":[{"name":"`+rid+`","containerEdits":{"deviceNodes":[{"path":"/dev/tty40"}]}}]}`, 0o644)
	}
	// A spec left by a DEL killed after its commit names devices the id no
	// longer holds. An ADD of the id that gets no further than its choice
	// (here: too few devices) must not leave it: a later kill between
	// commit and spec write would otherwise leave it for a live id.
	stale("a")
	if r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:100", "CDI_REQUEST_ID=a"); r.code(t) != 103 {
		t.Fatal(r.stdout)
	}
	if _, err := os.Stat(specOf("a")); !os.IsNotExist(err) {
		t.Fatalf("a failed ADD left the stale spec: %v", err)
	}
	stale("a")
	if r := n.run("generic-tty", conf, ttyAdd...); r.status != 0 {
		t.Fatal(r.stdout)
	}
	if got := nodesIn("a"); !slices.Equal(got, []string{"/dev/tty14"}) {
		t.Fatalf("fresh ADD left the spec at %v", got)
	}
	stale("a") // left by an ADD killed between its commit and its spec write
	if r := n.run("generic-tty", conf, ttyAdd...); r.status != 0 {
		t.Fatal(r.stdout)
	}
	if got := nodesIn("a"); !slices.Equal(got, []string{"/dev/tty14"}) {
		t.Fatalf("replay left the spec at %v", got)
	}
}

// storeID returns the identity of the node's tty store, which its spec
// files and their temporary files carry in their names.
func storeID(t *testing.T, n *node) string {
	t.Helper()
	var id string
	if err := store.Inspect(store.Path(n.state, "generic-tty"), 5*time.Second, func(tx *store.Tx) error { id = tx.ID(); return nil }); err != nil || id == "" {
		t.Fatalf("store identity %q: %v", id, err)
	}
	return id
}

// A later write removes the temporary files that killed writers
// left, once they are stale, in the spec directory and the state
// directory; fresh ones and other files stay.
func TestLitterSwept(t *testing.T) {
	n := newNode(t, specTTYHost)
	dir := filepath.Join(t.TempDir(), "cdi")
	conf := `{"cdiVersion":"0.0.2","name":"t","type":"tty","plugin":"generic-tty","args":{"num_system_reserved":12,"cdi_spec":{"kind":"example.com/tty","dir":"` + dir + `"}}}`
	makeStore(t, n, conf)
	id := storeID(t, n)
	keep := map[string]bool{
		filepath.Join(dir, ".tmp-example.com-tty_123_generic-tty-"+id):   false,
		filepath.Join(dir, ".tmp-example.com-tty_fresh_generic-tty-"+id): true,
		filepath.Join(dir, ".tmp-example.com-tty_1_generic-tty-ffff"):    true, // another store's
		filepath.Join(dir, ".tmp-other.com-tty_1_generic-tty-"+id):       true, // another kind's
		filepath.Join(n.state, "generic-tty.db.new-77-1"):                false,
		filepath.Join(n.state, "generic-tty.db.new-78-fresh"):            true,
		filepath.Join(n.state, "drm.db.new-79-1"):                        true,
		filepath.Join(n.state, "generic-tty.db.new-not-a-file/sub"):      true,
	}
	for p := range keep {
		mkdirMode(t, filepath.Dir(p), 0o700)
		writeT(t, p, "half written", 0o600)
	}
	old := time.Now().Add(-time.Hour)
	for p := range keep {
		if !strings.Contains(p, "fresh") {
			for _, q := range []string{p, filepath.Dir(p)} {
				if err := os.Chtimes(q, old, old); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if r := n.run("generic-tty", conf, ttyAdd...); r.status != 0 {
		t.Fatal(r.stdout)
	}
	for p, want := range keep {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", p, err == nil, want)
		}
	}
}

// Damage that bbolt reads without complaint — a changed byte in a
// record — fails the record's checksum: 106, DEL exits 0, file untouched.
// cdictl check finds it; index damage it can repair from intact records.
func TestChecksumsAndCheck(t *testing.T) {
	n := newNode(t, specTTYHost)
	conf := readConf(t, "tty.conf")
	for _, id := range []string{"a", "b"} {
		if r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:2", "CDI_REQUEST_ID="+id); r.status != 0 {
			t.Fatal(r.stdout)
		}
	}
	check := func(args ...string) result {
		return runArgs(t, filepath.Join(binDir, "cdictl"), append([]string{"check", "-o", "json"}, args...),
			[]string{"CDI_STATE_DIR=" + n.state})
	}
	if r := check(); r.status != 0 || !strings.Contains(r.stdout, `"problems": []`) {
		t.Fatalf("check of a sound store: %d %s%s", r.status, r.stdout, r.stderr)
	}
	path := store.Path(n.state, "generic-tty")
	good, _ := os.ReadFile(path)

	// A record's node path changed in place: still valid JSON. Every copy
	// in the file is changed, as free pages keep older ones.
	bad := bytes.ReplaceAll(good, []byte(`"/dev/tty13"`), []byte(`"/dev/tty19"`))
	if bytes.Equal(bad, good) {
		t.Fatal("record not found in the file")
	}
	writeT(t, path, string(bad), 0o600)
	r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:2", "CDI_REQUEST_ID=a")
	if r.status != 1 || r.code(t) != 106 || !strings.Contains(r.stdout, "fails its checksum") {
		t.Fatalf("ADD on a changed record: %s", r.stdout)
	}
	if r := n.run("generic-tty", conf, ttyDel...); r.status != 0 || r.code(t) != 106 {
		t.Fatalf("DEL: %s", r.stdout)
	}
	if r := check("--repair"); r.status != 1 || !strings.Contains(r.stdout, "fails its checksum") || !strings.Contains(r.stdout, `"repairable": false`) {
		t.Fatalf("check --repair of a damaged record: %d %s%s", r.status, r.stdout, r.stderr)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, bad) {
		t.Fatal("the damaged store was written")
	}

	// An index entry changed in place: the records are intact, so the
	// index can be rebuilt.
	bad = append([]byte(nil), good...)
	idx := indexValues(good, "tty15")
	if len(idx) == 0 {
		t.Fatal("index entry not found")
	}
	for _, i := range idx {
		bad[i] ^= 0x20 // "b" → "B"
	}
	writeT(t, path, string(bad), 0o600)
	if r := check(); r.status != 1 || !strings.Contains(r.stdout, `"repairable": true`) {
		t.Fatalf("check of a damaged index: %d %s%s", r.status, r.stdout, r.stderr)
	}
	if r := check("--repair"); r.status != 0 || !strings.Contains(r.stdout, `"repaired": true`) {
		t.Fatalf("check --repair: %d %s%s", r.status, r.stdout, r.stderr)
	}
	if r := check(); r.status != 0 {
		t.Fatalf("check after the repair: %d %s%s", r.status, r.stdout, r.stderr)
	}
	if r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:2", "CDI_REQUEST_ID=b"); r.status != 0 ||
		!slices.Equal(r.devices(t), []string{"/dev/tty15", "/dev/tty16"}) {
		t.Fatalf("replay after the repair: %s", r.stdout)
	}
}

// indexValues finds the byte offsets of the request-id "b" that index
// entries for key map to in a store file, in every copy: the key, then 8
// checksum bytes, then the id.
func indexValues(file []byte, key string) []int {
	var out []int
	for off := 0; ; {
		i := bytes.Index(file[off:], []byte(key))
		if i < 0 {
			return out
		}
		if at := off + i + len(key) + 8; at < len(file) && file[at] == 'b' {
			out = append(out, at)
		}
		off += i + 1
	}
}

// makeStore creates the node's tty store with one allocation.
func makeStore(t *testing.T, n *node, conf string) {
	t.Helper()
	if r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=x"); r.status != 0 {
		t.Fatal(r.stdout)
	}
}

func mkdirMode(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func writeT(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func symlinkT(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func lchown(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.Lchown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// specNodes returns the device node paths of the request's own device in
// a CDI spec file, the first; the others must be its devices' own entries,
// named <request>_<key>, each with nodes of the request's.
func specNodes(t *testing.T, path string) []string {
	t.Helper()
	var spec struct {
		Devices []struct {
			Name           string `json:"name"`
			ContainerEdits struct {
				DeviceNodes []struct{ Path string } `json:"deviceNodes"`
			} `json:"containerEdits"`
		} `json:"devices"`
	}
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err != nil || len(spec.Devices) == 0 {
		t.Errorf("%s: %v, %d devices", path, err, len(spec.Devices))
		return nil
	}
	all := map[string]bool{}
	for _, n := range spec.Devices[0].ContainerEdits.DeviceNodes {
		all[n.Path] = true
	}
	for _, d := range spec.Devices[1:] {
		if !strings.HasPrefix(d.Name, spec.Devices[0].Name+"_") {
			t.Errorf("%s: device %q is not one of request %q's", path, d.Name, spec.Devices[0].Name)
		}
		for _, n := range d.ContainerEdits.DeviceNodes {
			if !all[n.Path] {
				t.Errorf("%s: device %q names %s, which the request's device does not", path, d.Name, n.Path)
			}
		}
	}
	var out []string
	for _, d := range spec.Devices[0].ContainerEdits.DeviceNodes {
		out = append(out, d.Path)
	}
	return out
}
