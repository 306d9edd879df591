// Package sockdir gives tests short directories for unix sockets. A path
// under t.TempDir() grows with TMPDIR and the test's name and can pass
// the 107 bytes a socket path may have (internal/unixsock); one under New's
// directory is /tmp/<prefix> and eight letters, whatever TMPDIR is, so a
// test's margin does not depend on the machine.
package sockdir

import (
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/cdi-exec/plugins/internal/unixsock"
)

// Base is where the directories are made: fixed, not $TMPDIR.
const Base = "/tmp"

// New makes a directory /tmp/<prefix>XXXXXXXX (always that long) and
// removes it with everything in it when the test ends.
func New(t testing.TB, prefix string) string {
	t.Helper()
	for {
		dir := filepath.Join(Base, prefix+rand.Text()[:8])
		err := os.Mkdir(dir, 0o700)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := os.RemoveAll(dir); err != nil {
				t.Errorf("removing %s: %v", dir, err)
			}
		})
		return dir
	}
}

// Path joins elem under dir into a socket path, and fails the test,
// saying why, when the path is too long for a unix socket.
func Path(t testing.TB, dir string, elem ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{dir}, elem...)...)
	if err := unixsock.Check(p); err != nil {
		t.Fatal(err)
	}
	return p
}
