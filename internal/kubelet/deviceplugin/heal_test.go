package deviceplugin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
	"github.com/cdi-exec/plugins/internal/kubelet/podgc"
	"github.com/cdi-exec/plugins/internal/kubelet/specheal"
	"github.com/cdi-exec/plugins/test/kubelettest"
)

// specOf waits until the request-id has exactly one spec file and
// returns its path and content.
func (n *node) specOf(id string) (string, []byte) {
	n.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if files := n.specFiles(id); len(files) == 1 {
			b, err := os.ReadFile(files[0])
			if err == nil {
				return files[0], b
			}
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("no spec file of %s within a minute: %v", id, n.specFiles(id))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// restored waits until the metric counts n spec files put back.
func restored(t *testing.T, m *metrics.Metrics, n float64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := kubelettest.Metric(t, m.Registry(), "cdi_exec_spec_files_restored_total", "driver", ttyRes)
		if got == n {
			return
		}
		if got > n || time.Now().After(deadline) {
			t.Fatalf("cdi_exec_spec_files_restored_total = %v, want %v", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The spec file of an allocation the kubelet lists is put back, the same,
// when it goes, one by one or with the whole directory; that of an
// allocation it no longer lists is not.
func TestSpecFilesPutBack(t *testing.T) {
	n := ttyNode(t)
	opt := n.options()
	opt.Metrics = metrics.New()
	n.start(opt)
	c := n.kubelet.Dial(n.register().Endpoint)
	for _, ids := range [][]string{{"tty13", "tty14"}, {"tty15"}} {
		if _, err := allocate(c, ids...); err != nil {
			t.Fatal(err)
		}
	}
	live := podgc.RequestID(ttyRes, "tty", []string{"tty13", "tty14"})
	gone := podgc.RequestID(ttyRes, "tty", []string{"tty15"})
	n.kubelet.SetPods(kubelettest.Pod("default", "runs", "c", ttyRes, "tty14", "tty13"))
	path, want := n.specOf(live)
	gonePath, _ := n.specOf(gone)

	if err := os.Remove(gonePath); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	restored(t, opt.Metrics, 1)
	if p, got := n.specOf(live); p != path || !bytes.Equal(got, want) {
		t.Errorf("put back as %s:\n%s\nwant %s:\n%s", p, got, path, want)
	}
	// The check that put back the live one did not write the other.
	if files := n.specFiles(gone); len(files) != 0 {
		t.Errorf("the spec of an allocation the kubelet does not list was written: %v", files)
	}
	if err := os.RemoveAll(n.specDir); err != nil {
		t.Fatal(err)
	}
	restored(t, opt.Metrics, 2)
	if p, got := n.specOf(live); p != path || !bytes.Equal(got, want) {
		t.Errorf("after the directory went, put back as %s:\n%s", p, got)
	}
	if got := n.held(t, "generic-tty", ""); len(got) != 3 {
		t.Errorf("the ttys held are %v, want the three allocated", got)
	}
}

// An allocation the kubelet listed when the check read it, but no longer
// lists when its restore runs, is left alone: no ADD, no spec file.
func TestRestoreSkipsWhatTheKubeletDropped(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	c := n.kubelet.Dial(n.register().Endpoint)
	if _, err := allocate(c, "tty13"); err != nil {
		t.Fatal(err)
	}
	id := podgc.RequestID(ttyRes, "tty", []string{"tty13"})
	path, _ := n.specOf(id)
	n.kubelet.SetPods(kubelettest.Pod("default", "runs", "c", ttyRes, "tty13"))
	r := n.mode.res[0]
	recs := &heldRecords{r: r, socket: n.mode.podResources()}
	entries, err := recs.Expected(context.Background())
	if err != nil || len(entries) != 1 || entries[0].ID != id || len(entries[0].Files) != 1 {
		t.Fatalf("Expected = %+v, %v", entries, err)
	}
	if f := entries[0].Files[0]; f != specheal.SpecFile(r.specs[0], id) {
		t.Errorf("the entry names %v", f)
	}
	// The pod ends and its allocation is freed, as the collector would.
	n.kubelet.SetPods()
	if _, err := r.caller.Del(context.Background(), r.confs[0], id); err != nil {
		t.Fatal(err)
	}
	if err := recs.Restore(context.Background(), entries[0]); !errors.Is(err, specheal.ErrFreed) {
		t.Fatalf("Restore of a dropped allocation: %v, want ErrFreed", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the spec file of a freed allocation was written: %v", err)
	}
	if got := n.held(t, "generic-tty", ""); len(got) != 0 {
		t.Errorf("the restore allocated %v afresh", got)
	}
}
