// Package proclocks reads /proc/locks for tests: how many lock calls the
// kernel holds blocked on a file. A waiter that polled with non-blocking
// tries would never show there, one that waits in the kernel does.
package proclocks

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Blocked counts the lock calls of class (FLOCK for flock(2), OFDLCK for
// open file description locks) that the kernel holds blocked on the file
// at path: the lines of /proc/locks marked "->" that name it. It skips
// the test on a machine without /proc/locks.
func Blocked(t testing.TB, class, path string) int {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	// How /proc/locks names a file: major:minor:inode, the device's
	// numbers in hex.
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Skipf("no /proc/locks to see the waiters in: %v", err)
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 6 && f[1] == "->" && f[2] == class && f[6] == id {
			n++
		}
	}
	return n
}
