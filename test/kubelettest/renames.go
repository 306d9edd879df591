package kubelettest

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Renames counts the files renamed into place in one directory: every
// atomic replace of a file (internal/atomicfile) is one rename.
type Renames struct {
	t  *testing.T
	fd int
}

// WatchRenames counts the renames into dir from now until the test ends.
func WatchRenames(t *testing.T, dir string) *Renames {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	// IN_CREATE too, though only renames are counted: inotify merges an
	// event with the one before it when both are alike and unread, and the
	// temporary file each write creates keeps two renames apart.
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO|unix.IN_CREATE); err != nil {
		t.Fatalf("inotify watch %s: %v", dir, err)
	}
	return &Renames{t: t, fd: fd}
}

// Take returns how many times name was renamed into place since the last
// call.
func (w *Renames) Take(name string) int {
	w.t.Helper()
	n := 0
	buf := make([]byte, 64<<10)
	for {
		got, err := unix.Read(w.fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			return n
		}
		if err != nil {
			w.t.Fatalf("inotify read: %v", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= got; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			b := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			if ev.Mask&unix.IN_MOVED_TO != 0 && string(bytes.TrimRight(b, "\x00")) == name {
				n++
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}
