package sockdir

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// New's directories are short, fixed-length, private and gone after the
// test, whatever TMPDIR says.
func TestNew(t *testing.T) {
	t.Setenv("TMPDIR", "/tmp/"+strings.Repeat("a-long-temporary-directory-", 3))
	var dirs []string
	t.Run("make", func(t *testing.T) {
		for range 3 {
			dir := New(t, "cdi-")
			if len(dir) != len("/tmp/cdi-")+8 || !strings.HasPrefix(dir, "/tmp/cdi-") {
				t.Errorf("New = %q, want /tmp/cdi- and 8 letters", dir)
			}
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
				t.Errorf("%s: %v %v", dir, fi, err)
			}
			dirs = append(dirs, dir)
		}
	})
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", d, err)
		}
	}
}

// fakeT records a Fatal instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper()           {}
func (f *fakeT) Fatal(args ...any) { f.failed = fmt.Sprint(args...) }

// Path refuses a socket path over the limit, clearly, and passes one at it.
func TestPath(t *testing.T) {
	dir := "/tmp/cdi-abcdefgh"
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{strings.Repeat("s", 107-len(dir)-1), true},
		{strings.Repeat("s", 107-len(dir)), false},
	} {
		f := &fakeT{TB: t}
		p := Path(f, dir, tt.name)
		if ok := f.failed == ""; ok != tt.ok {
			t.Errorf("Path(%d bytes): failed %q", len(p), f.failed)
		}
		if !tt.ok && !strings.Contains(f.failed, "108 bytes long, more than a unix socket can have (107)") {
			t.Errorf("Path(%d bytes) failed with %q: does not say why", len(p), f.failed)
		}
	}
}
