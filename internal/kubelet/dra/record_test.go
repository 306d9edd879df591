package dra

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/cdi-exec/plugins/internal/kubelet/claimstate"
	"github.com/cdi-exec/plugins/test/kubelettest"
)

// TestPrepareAgainFromRecord: a claim recorded as prepared is prepared
// again (a kubelet restart, a retry, a second pod of a shared claim)
// from its record, with no plugin run, by this process or the next; a
// claim whose spec files are gone, or whose record an older version
// wrote without each device's CDI ids, replays its ADD instead.
func TestPrepareAgainFromRecord(t *testing.T) {
	n := ttyNode(t)
	opt, reg := n.observed()
	in := n.start(opt)
	adds := func() float64 {
		return kubelettest.Metric(t, reg.Registry(), "cdi_exec_plugin_run_duration_seconds", "plugin", "generic-tty", "command", "ADD", "code", "0")
	}
	c := n.claim("ttys", uid(7), ttyDriver, "tty15", "tty13")
	first := n.prepare(ttyDriver, c)
	n.checkPrepared(c, first, "tty15", "tty13")
	if got := adds(); got != 1 {
		t.Fatalf("%v ADDs for the first prepare, want 1", got)
	}
	rec := n.records(ttyDriver)[string(c.UID)]
	for _, d := range first.Devices {
		if !slices.Equal(rec.Devices[d.DeviceName], d.CdiDeviceIds) {
			t.Fatalf("record of %s: %v, want the answer's %v", d.DeviceName, rec.Devices[d.DeviceName], d.CdiDeviceIds)
		}
	}

	for i := range 3 {
		again := n.prepare(ttyDriver, c)
		n.checkPrepared(c, again, "tty15", "tty13")
		if got := adds(); got != 1 {
			t.Fatalf("prepare %d again: %v ADDs in all, want still 1", i, got)
		}
	}

	// The next process answers from the record too.
	if err := in.shutdown(); err != nil {
		t.Fatal(err)
	}
	opt, reg = n.observed()
	n.start(opt)
	n.checkPrepared(c, n.prepare(ttyDriver, c), "tty15", "tty13")
	if got := adds(); got != 0 {
		t.Fatalf("after a restart: %v ADDs, want none", got)
	}

	// Its spec files gone: the ADD is replayed, and writes them anew.
	for _, f := range n.specFiles() {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	n.checkPrepared(c, n.prepare(ttyDriver, c), "tty15", "tty13")
	if got := adds(); got != 1 {
		t.Fatalf("spec files gone: %v ADDs, want 1 replay", got)
	}

	// A record of an older version, without each device's CDI ids.
	st, err := claimstate.Open(n.claimDir, ttyDriver)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Update(context.Background(), func(cs claimstate.Claims) error {
		r := cs[string(c.UID)]
		r.Devices = nil
		cs[string(c.UID)] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	n.checkPrepared(c, n.prepare(ttyDriver, c), "tty15", "tty13")
	if got := adds(); got != 2 {
		t.Fatalf("a record without CDI ids by device: %v ADDs, want a second replay", got)
	}
	if r := n.records(ttyDriver)[string(c.UID)]; len(r.Devices) != 2 {
		t.Fatalf("the replay did not record each device's CDI ids: %+v", r)
	}
}
