package unixsock

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Check agrees with the kernel: a path of MaxPath bytes binds, one byte
// more does not, and Check refuses exactly that one, saying why.
func TestCheck(t *testing.T) {
	dir, err := filepath.Abs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		extra int // bytes over MaxPath
		ok    bool
	}{{-1, true}, {0, true}, {1, false}, {40, false}} {
		name := dir + "/"
		name += strings.Repeat("s", MaxPath+tt.extra-len(name))
		err := Check(name)
		if (err == nil) != tt.ok {
			t.Errorf("Check(%d bytes) = %v", len(name), err)
		}
		if err != nil && !strings.Contains(err.Error(), "more than a unix socket can have (107)") {
			t.Errorf("Check(%d bytes) = %v: does not say why", len(name), err)
		}
		if len(dir)+2 > MaxPath { // no room to bind in this temporary directory
			continue
		}
		l, lerr := net.Listen("unix", name)
		if lerr == nil {
			l.Close()
		}
		if (lerr == nil) != tt.ok || lerr != nil && !errors.Is(lerr, syscall.EINVAL) {
			t.Errorf("binding %d bytes: %v, Check says %v", len(name), lerr, err)
		}
	}
}
