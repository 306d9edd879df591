package specheal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
)

// fakeRecords is a mode whose records are entries in memory and whose
// Restore writes each missing file (a prefix's as <prefix>x.json).
type fakeRecords struct {
	mu       sync.Mutex
	entries  []Entry
	reads    int
	restored []string         // ids, in order
	fail     map[string]error // Restore fails for these ids (ErrFreed: writes nothing)
	noWrite  map[string]bool  // Restore succeeds but writes nothing
	// afterFirstRead, when set, changes the entries after the first
	// Expected of a check (something freed meanwhile).
	afterFirstRead func([]Entry) []Entry
}

func (r *fakeRecords) Expected(context.Context) ([]Entry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	out := slices.Clone(r.entries)
	if r.reads == 1 && r.afterFirstRead != nil {
		r.entries = r.afterFirstRead(r.entries)
	}
	return out, nil
}

func (r *fakeRecords) Restore(_ context.Context, e Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.fail[e.ID]; err != nil {
		return err
	}
	if !r.noWrite[e.ID] {
		for _, f := range e.Files {
			name := f.Name
			if name == "" {
				name = f.Prefix + "x.json"
			}
			if err := os.MkdirAll(f.Dir, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(f.Dir, name), []byte("{}"), 0o644); err != nil {
				return err
			}
		}
	}
	r.restored = append(r.restored, e.ID)
	return nil
}

func (r *fakeRecords) restoredIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.restored)
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func restoredMetric(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "cdi_exec_spec_files_restored_total{") {
			return line
		}
	}
	return ""
}

func TestCheck(t *testing.T) {
	spec := &cdispec.Config{Kind: "example.com/tty"}
	for _, tc := range []struct {
		name    string
		present []string // files made before the check, relative to dir
		entries func(dir string) []Entry
		fail    map[string]error
		noWrite map[string]bool
		want    []string // ids restored
		files   int      // files counted as restored
		err     string
	}{{
		name:    "nothing missing",
		present: []string{"example.com-tty_a_generic-tty-00ff.json", "drv_metadata_a_r.json"},
		entries: func(dir string) []Entry {
			c := *spec
			c.Dir = dir
			return []Entry{{ID: "a", Files: []File{SpecFile(&c, "a"), {Dir: dir, Name: "drv_metadata_a_r.json"}}}}
		},
	}, {
		name: "a spec file missing, whatever store owned it",
		// Another id's file, a hidden temporary one and a prefix's
		// file that is no .json do not stand in for it.
		present: []string{"example.com-tty_a-1_generic-tty-00ff.json", ".tmp-example.com-tty_a_x", "example.com-tty_a_generic-tty-00ff.json.bak"},
		entries: func(dir string) []Entry {
			c := *spec
			c.Dir = dir
			return []Entry{{ID: "a", Files: []File{SpecFile(&c, "a")}}, {ID: "a-1", Files: []File{SpecFile(&c, "a-1")}}}
		},
		want: []string{"a"}, files: 1,
	}, {
		name:    "a named file missing; of two entries only the one missing a file",
		present: []string{"example.com-tty_b_drm-01.json"},
		entries: func(dir string) []Entry {
			c := *spec
			c.Dir = dir
			return []Entry{
				{ID: "a", Files: []File{SpecFile(&c, "a"), {Dir: dir, Name: "drv_metadata_a_r.json"}}},
				{ID: "b", Files: []File{SpecFile(&c, "b")}},
			}
		},
		want: []string{"a"}, files: 2,
	}, {
		name: "the directory gone",
		entries: func(dir string) []Entry {
			c := *spec
			c.Dir = filepath.Join(dir, "gone")
			return []Entry{{ID: "a", Files: []File{SpecFile(&c, "a")}}}
		},
		want: []string{"a"}, files: 1,
	}, {
		name: "a restore that fails does not stop the others",
		entries: func(dir string) []Entry {
			c := *spec
			c.Dir = dir
			return []Entry{{ID: "a", Files: []File{SpecFile(&c, "a")}}, {ID: "b", Files: []File{SpecFile(&c, "b")}}}
		},
		fail: map[string]error{"a": errors.New("plugin failed")},
		want: []string{"b"}, files: 1, err: "a: plugin failed",
	}, {
		name: "an entry freed before its restore is no failure",
		entries: func(dir string) []Entry {
			c := *spec
			c.Dir = dir
			return []Entry{{ID: "a", Files: []File{SpecFile(&c, "a")}}, {ID: "b", Files: []File{SpecFile(&c, "b")}}}
		},
		fail: map[string]error{"a": fmt.Errorf("no pod lists it: %w", ErrFreed)},
		want: []string{"b"}, files: 1,
	}, {
		name: "a restore that writes nothing is not counted",
		entries: func(dir string) []Entry {
			c := *spec
			c.Dir = dir
			return []Entry{{ID: "a", Files: []File{SpecFile(&c, "a")}}}
		},
		noWrite: map[string]bool{"a": true},
		want:    []string{"a"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, p := range tc.present {
				touch(t, filepath.Join(dir, p))
			}
			r := &fakeRecords{entries: tc.entries(dir), fail: tc.fail, noWrite: tc.noWrite}
			m := metrics.New()
			h := &Healer{Driver: "cdi-exec.io/tty", Dirs: []string{dir}, Records: r, Metrics: m}
			n, err := h.Check(context.Background())
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("Check: %v, want %q", err, tc.err)
			}
			if got := r.restoredIDs(); !slices.Equal(got, tc.want) {
				t.Errorf("restored %v, want %v", got, tc.want)
			}
			if n != tc.files {
				t.Errorf("Check counted %d files restored, want %d", n, tc.files)
			}
			line := restoredMetric(t, m)
			if tc.files == 0 && line != "" || tc.files > 0 && !strings.HasSuffix(line, " "+strconv.Itoa(tc.files)) {
				t.Errorf("metric %q after %d files", line, tc.files)
			}
			// Nothing is missing any more but what failed.
			if again := missing(tc.entries(dir)); len(tc.fail) == 0 && len(tc.noWrite) == 0 && len(again) != 0 {
				t.Errorf("still missing after the check: %v", again)
			}
		})
	}
}

// An entry freed between the check's two reads of the records is not
// restored; the records are read twice only when something is missing.
func TestCheckRereadsBeforeRestoring(t *testing.T) {
	dir := t.TempDir()
	r := &fakeRecords{
		entries: []Entry{{ID: "a", Files: []File{{Dir: dir, Name: "a.json"}}}, {ID: "b", Files: []File{{Dir: dir, Name: "b.json"}}}},
		afterFirstRead: func(es []Entry) []Entry {
			return slices.DeleteFunc(slices.Clone(es), func(e Entry) bool { return e.ID == "a" })
		},
	}
	h := &Healer{Dirs: []string{dir}, Records: r}
	if _, err := h.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.restoredIDs(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("restored %v, want only b", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a freed entry's file was written: %v", err)
	}
	r.reads = 0
	if _, err := h.Check(context.Background()); err != nil || r.reads != 1 {
		t.Errorf("a check with nothing missing read the records %d times: %v", r.reads, err)
	}
}

func TestRelevant(t *testing.T) {
	h := &Healer{Dirs: []string{"/run/cdi"}}
	for _, tc := range []struct {
		ev   fsnotify.Event
		want bool
	}{
		{fsnotify.Event{Name: "/run/cdi/k-tty_a_x-01.json", Op: fsnotify.Remove}, true},
		{fsnotify.Event{Name: "/run/cdi/k-tty_a_x-01.json", Op: fsnotify.Rename}, true},
		{fsnotify.Event{Name: "/run/cdi/k-tty_a_x-01.json", Op: fsnotify.Create}, false},
		{fsnotify.Event{Name: "/run/cdi/k-tty_a_x-01.json", Op: fsnotify.Write}, false},
		{fsnotify.Event{Name: "/run/cdi/.tmp-k-tty_123_x-01", Op: fsnotify.Rename}, false},
		{fsnotify.Event{Name: "/run/cdi/notes.txt", Op: fsnotify.Remove}, false},
		{fsnotify.Event{Name: "/run/cdi", Op: fsnotify.Remove}, true},
		{fsnotify.Event{Name: "/run/cdi", Op: fsnotify.Create}, true},
		{fsnotify.Event{Name: "/run/cdi", Op: fsnotify.Rename}, true},
		{fsnotify.Event{Name: "/run/other/k.json", Op: fsnotify.Remove}, false},
		{fsnotify.Event{Name: "/run/cdi2", Op: fsnotify.Remove}, false},
		{fsnotify.Event{Name: "/run/cdi/sub/k.json", Op: fsnotify.Remove}, false},
	} {
		if got := h.relevant(tc.ev); got != tc.want {
			t.Errorf("relevant(%v) = %v, want %v", tc.ev, got, tc.want)
		}
	}
	// A directory above: events of the way down matter, not others.
	h = &Healer{Dirs: []string{"/var/run/cdi"}}
	if !h.relevant(fsnotify.Event{Name: "/var/run", Op: fsnotify.Create}) || h.relevant(fsnotify.Event{Name: "/var/log", Op: fsnotify.Create}) {
		t.Error("events of the directories above are told apart wrongly")
	}
}

// Run restores at start, then after each way the files can go: removed
// one by one, the directory removed or renamed away, the directory made
// again empty. No safety re-check runs (Recheck < 0): the watch alone
// sees each.
func TestRunRestoresWhatGoes(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "run", "cdi")
	spec := &cdispec.Config{Kind: "example.com/tty", Dir: dir}
	r := &fakeRecords{
		entries: []Entry{{ID: "a", Files: []File{SpecFile(spec, "a")}}, {ID: "b", Files: []File{SpecFile(spec, "b"), {Dir: dir, Name: "drv_metadata_b_r.json"}}}},
	}
	m := metrics.New()
	checks := make(chan int, 64)
	h := &Healer{Driver: "d", Dirs: []string{dir}, Records: r, Metrics: m, Debounce: time.Millisecond, Recheck: -1,
		checked: func(n int) { checks <- n }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Run(ctx); close(done) }()
	defer func() {
		cancel()
		<-done
	}()
	seen := 0
	// wait waits for the check that restores something, and wants it to
	// have restored ids, once each.
	wait := func(step string, ids ...string) {
		t.Helper()
		for {
			select {
			case n := <-checks:
				if n == 0 {
					continue // a check that found nothing missing
				}
			case <-time.After(time.Minute):
				t.Fatalf("%s: nothing restored", step)
			}
			break
		}
		all := r.restoredIDs()
		got := all[seen:]
		seen = len(all)
		slices.Sort(got)
		if !slices.Equal(got, ids) {
			t.Fatalf("%s: restored %v, want %v", step, got, ids)
		}
		if left := missing(r.entries); len(left) != 0 {
			t.Fatalf("%s: still missing %v", step, left)
		}
	}
	// Nothing there yet, not even the directory: the check at start
	// makes it.
	wait("at start", "a", "b")
	if err := os.Remove(filepath.Join(dir, "example.com-tty_a_x.json")); err != nil {
		t.Fatal(err)
	}
	wait("one file removed", "a")
	if err := os.Remove(filepath.Join(dir, "drv_metadata_b_r.json")); err != nil {
		t.Fatal(err)
	}
	wait("a named file removed", "b")
	if err := os.Rename(dir, filepath.Join(root, "trash")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "trash")); err != nil {
		t.Fatal(err)
	}
	wait("the directory removed", "a", "b")
	if err := os.Rename(dir, filepath.Join(root, "old")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	wait("the directory made again, empty", "a", "b")
	// Files only written start no restore: the next one is the one a
	// removal asks for, of that entry alone.
	touch(t, filepath.Join(dir, "example.com-tty_c_x.json"))
	if err := os.Remove(filepath.Join(dir, "example.com-tty_b_x.json")); err != nil {
		t.Fatal(err)
	}
	wait("after a write, a removal", "b")
	if line := restoredMetric(t, m); line != `cdi_exec_spec_files_restored_total{driver="d"} 12` {
		t.Errorf("metric %q, want 12 files", line)
	}
}

// A check with nothing to do at start, then a change, then the end of
// the context: Run returns.
func TestRunEnds(t *testing.T) {
	dir := t.TempDir()
	r := &fakeRecords{}
	h := &Healer{Dirs: []string{dir}, Records: r, Recheck: -1}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.Run(ctx)
	if r.reads != 1 {
		t.Errorf("Run checked %d times before it saw the end", r.reads)
	}
}
