package dra

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// recordWrites counts the claim-record files renamed into place in dir
// from now on: every write of a driver's records is one rename
// (internal/atomicfile).
type recordWrites struct {
	t  *testing.T
	fd int
}

func watchRecordWrites(t *testing.T, dir string) *recordWrites {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO); err != nil {
		t.Fatalf("inotify watch %s: %v", dir, err)
	}
	return &recordWrites{t: t, fd: fd}
}

// take returns how many times name was renamed into place since the last
// call.
func (w *recordWrites) take(name string) int {
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
			if string(bytes.TrimRight(b, "\x00")) == name {
				n++
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// A claim prepared for the first time writes the driver's records once,
// after its ADD; a prepare the kubelet repeats writes nothing; an
// unprepare writes once.
func TestPrepareWritesRecordOnce(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	w := watchRecordWrites(t, n.claimDir)
	file := ttyDriver + ".json"
	c := n.claim("one-tty", uid(1), ttyDriver, "tty15")
	n.checkPrepared(c, n.prepare(ttyDriver, c), "tty15")
	if got := w.take(file); got != 1 {
		t.Fatalf("a first prepare wrote the records %d times, want 1", got)
	}
	n.checkPrepared(c, n.prepare(ttyDriver, c), "tty15")
	if got := w.take(file); got != 0 {
		t.Fatalf("a repeated prepare wrote the records %d times, want 0", got)
	}
	if r := n.unprepare(ttyDriver, c); r.Error != "" {
		t.Fatal(r.Error)
	}
	if got := w.take(file); got != 1 {
		t.Fatalf("an unprepare wrote the records %d times, want 1", got)
	}
	// A prepare that fails writes nothing.
	bad := n.claim("bad", uid(2), ttyDriver, "tty42")
	if r := n.prepare(ttyDriver, bad); r.Error == "" {
		t.Fatal("a prepare of tty42 succeeded")
	}
	if got := w.take(file); got != 0 {
		t.Fatalf("a failed prepare wrote the records %d times, want 0", got)
	}
}
