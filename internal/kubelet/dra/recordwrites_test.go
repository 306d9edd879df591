package dra

import (
	"testing"

	"github.com/cdi-exec/plugins/test/kubelettest"
)

// A claim prepared for the first time writes the driver's records once,
// after its ADD; a prepare the kubelet repeats writes nothing; an
// unprepare writes once.
func TestPrepareWritesRecordOnce(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	w := kubelettest.WatchRenames(t, n.claimDir)
	file := ttyDriver + ".json"
	c := n.claim("one-tty", uid(1), ttyDriver, "tty15")
	n.checkPrepared(c, n.prepare(ttyDriver, c), "tty15")
	if got := w.Take(file); got != 1 {
		t.Fatalf("a first prepare wrote the records %d times, want 1", got)
	}
	n.checkPrepared(c, n.prepare(ttyDriver, c), "tty15")
	if got := w.Take(file); got != 0 {
		t.Fatalf("a repeated prepare wrote the records %d times, want 0", got)
	}
	if r := n.unprepare(ttyDriver, c); r.Error != "" {
		t.Fatal(r.Error)
	}
	if got := w.Take(file); got != 1 {
		t.Fatalf("an unprepare wrote the records %d times, want 1", got)
	}
	// A prepare that fails writes nothing.
	bad := n.claim("bad", uid(2), ttyDriver, "tty42")
	if r := n.prepare(ttyDriver, bad); r.Error == "" {
		t.Fatal("a prepare of tty42 succeeded")
	}
	if got := w.Take(file); got != 0 {
		t.Fatalf("a failed prepare wrote the records %d times, want 0", got)
	}
}
