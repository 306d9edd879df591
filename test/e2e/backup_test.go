package e2e

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// The backup recipe of docs/operations.md: a copy taken under a shared
// flock of the store file is consistent, because writers wait for the
// lock (and get 106 past CDI_LOCK_TIMEOUT) while readers go on; the copy
// restored into a state dir is a working store with exactly what was
// held when it was taken.
func TestBackupUnderSharedLock(t *testing.T) {
	n := newNode(t, fixture.Host{TTYs: map[string]int{"tty": 20}})
	conf := readConf(t, "tty.conf")
	add := func(id string, env ...string) result {
		return n.run("generic-tty", conf, append([]string{"CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=" + id}, env...)...)
	}
	if r := add("before"); r.status != 0 {
		t.Fatal(r.stdout)
	}
	db := filepath.Join(n.state, "generic-tty.db")
	f, err := os.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "generic-tty.db")
	copyFile(t, db, backup)
	if r := add("during", "CDI_LOCK_TIMEOUT=200ms"); r.status != 1 || r.code(t) != 106 {
		t.Fatalf("ADD under the backup's lock: %d %s", r.status, r.stdout)
	}
	if r := n.run("generic-tty", conf, "CDI_COMMAND=DEVICES"); r.status != 0 {
		t.Fatalf("DEVICES (a reader) under the backup's lock: %s", r.stdout)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if r := add("after"); r.status != 0 {
		t.Fatal(r.stdout)
	}

	restored := &node{t: t, root: n.root, state: filepath.Join(t.TempDir(), "state")}
	if err := os.MkdirAll(restored.state, 0o700); err != nil {
		t.Fatal(err)
	}
	copyFile(t, backup, filepath.Join(restored.state, "generic-tty.db"))
	recs := restored.records("generic-tty")
	if len(recs) != 1 || recs["before"] == nil {
		t.Fatalf("restored store holds %v, want only \"before\"", recs)
	}
	if r := restored.run("generic-tty", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=before"); r.stdout != "" {
		t.Fatalf("DEL on the restored store: %s", r.stdout)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
