// Package specheal puts back the CDI spec files of what a Kubernetes mode
// has prepared when they go missing while it is still prepared: a tmpfs
// spec directory cleaned by another tool, an operator who empties it, a
// driver restarted with another --cdi-spec-dir. The kubelet injects a
// running pod's devices by the CDI names it was given once (a DRA
// prepare, a device plugin's Allocate) at every container restart and
// never asks again, so without the files each restart fails for as long
// as the pod lives.
//
// A Healer checks when it starts and whenever a watched spec directory
// loses a file, is removed or is made again (inotify, through fsnotify;
// a burst of changes is one check), and once every Recheck besides, for
// what inotify cannot see (a file system mounted over the directory). A
// check asks the mode's Records what must exist, and has each entry whose
// files are missing restored, asking the records again first, so that
// an entry freed meanwhile is left alone.
package specheal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
)

// Defaults of a Healer.
const (
	// DefaultDebounce is how long a check waits after the first change of
	// a burst, so that a directory emptied file by file is one check.
	DefaultDebounce = 200 * time.Millisecond
	// DefaultRecheck is how often a check runs without a change seen:
	// inotify does not see a file system mounted over a watched
	// directory, and a watch can be lost (an overflowed queue is a check
	// at once).
	DefaultRecheck = 5 * time.Minute
)

// File is one spec file an entry needs in Dir: the file Name, or, when
// Name is empty, any file whose name starts with Prefix and ends in
// ".json" (a plugin's spec of a request-id, whichever store owns it:
// SpecFile).
type File struct {
	Dir    string
	Name   string
	Prefix string
}

// SpecFile is the file a plugin writes for requestID under the cdi_spec
// config c (cdispec.Config.FilePrefix).
func SpecFile(c *cdispec.Config, requestID string) File {
	return File{Dir: c.Dir, Prefix: c.FilePrefix(requestID)}
}

func (f File) String() string {
	if f.Name != "" {
		return filepath.Join(f.Dir, f.Name)
	}
	return filepath.Join(f.Dir, f.Prefix+"*.json")
}

// Entry is one thing a mode's records say is prepared.
type Entry struct {
	// ID names the entry in the log: a request-id, a claim's UID.
	ID string
	// Files are the spec files that must exist while it is prepared.
	Files []File
	// Data is the mode's own, handed back to Restore as it was.
	Data any
}

// ErrFreed is what Restore returns, wrapped or not, for an entry freed
// since the records listed it: nothing was written, and nothing is wrong.
var ErrFreed = errors.New("freed since it was listed")

// Records are a mode's records of what it has prepared.
type Records interface {
	// Expected lists what is prepared now, read afresh at each call.
	Expected(ctx context.Context) ([]Entry, error)
	// Restore writes the entry's spec files again (a pinned replay ADD).
	// The Healer calls it for an entry the records listed a moment ago;
	// Restore must still do nothing for an entry freed since, deciding
	// under the lock the mode's frees take, so that it never allocates
	// afresh what was just freed; it then returns ErrFreed.
	Restore(ctx context.Context, e Entry) error
}

// Healer watches spec directories and restores the missing files of the
// entries of Records.
type Healer struct {
	// Driver names the mode's driver or resource, in the log and the
	// metric's driver label.
	Driver  string
	Dirs    []string // the spec directories to watch
	Records Records
	Log     *slog.Logger     // nil: no log
	Metrics *metrics.Metrics // nil: nothing counted
	// Debounce and Recheck default to DefaultDebounce and
	// DefaultRecheck; a negative Recheck never checks unasked.
	Debounce time.Duration
	Recheck  time.Duration

	checked func(restored int) // called after each check of Run (tests)
}

func (h *Healer) log() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

// Check restores the missing spec files of every entry once, and returns
// how many files it put back. Errors of single entries are logged and
// joined; the other entries are still restored.
func (h *Healer) Check(ctx context.Context) (int, error) {
	entries, err := h.Records.Expected(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading what is prepared: %w", err)
	}
	if len(missing(entries)) == 0 {
		return 0, nil
	}
	// Asked again right before restoring: what was freed while the
	// directories were read is not written back.
	entries, err = h.Records.Expected(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading what is prepared: %w", err)
	}
	restored := 0
	var errs []error
	for _, m := range missing(entries) {
		if ctx.Err() != nil {
			return restored, ctx.Err()
		}
		e := entries[m.entry]
		err := h.Records.Restore(ctx, e)
		if errors.Is(err, ErrFreed) {
			h.log().Info("a missing CDI spec file is not put back: freed meanwhile", "driver", h.Driver, "id", e.ID, "missing", names(m.files))
			continue
		}
		if err != nil {
			h.log().Error("restoring missing CDI spec files failed", "driver", h.Driver, "id", e.ID, "missing", names(m.files), "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", e.ID, err))
			continue
		}
		for _, f := range m.files {
			path, ok := find(f, listing{})
			if !ok {
				h.log().Warn("a missing CDI spec file is still missing after its restore", "driver", h.Driver, "id", e.ID, "file", f.String())
				continue
			}
			restored++
			if h.Metrics != nil {
				h.Metrics.SpecFileRestored(h.Driver)
			}
			h.log().Info("restored a missing CDI spec file", "driver", h.Driver, "id", e.ID, "file", path)
		}
	}
	return restored, errors.Join(errs...)
}

// gap is an entry, by index, and its files that are missing.
type gap struct {
	entry int
	files []File
}

// missing lists the entries with files missing, reading each directory
// once.
func missing(entries []Entry) []gap {
	dirs := listing{}
	var out []gap
	for i, e := range entries {
		var files []File
		for _, f := range e.Files {
			if _, ok := find(f, dirs); !ok {
				files = append(files, f)
			}
		}
		if len(files) > 0 {
			out = append(out, gap{i, files})
		}
	}
	return out
}

// listing caches the sorted names in directories; a directory that
// cannot be read is empty.
type listing map[string][]string

func (l listing) names(dir string) []string {
	if names, ok := l[dir]; ok {
		return names
	}
	var names []string
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			names = append(names, e.Name())
		}
	}
	l[dir] = names // sorted by os.ReadDir
	return names
}

// find returns the path of the file that satisfies f, if one exists.
func find(f File, l listing) (string, bool) {
	names := l.names(f.Dir)
	if f.Name != "" {
		_, ok := slices.BinarySearch(names, f.Name)
		return filepath.Join(f.Dir, f.Name), ok
	}
	i, _ := slices.BinarySearch(names, f.Prefix)
	for ; i < len(names) && strings.HasPrefix(names[i], f.Prefix); i++ {
		if strings.HasSuffix(names[i], ".json") {
			return filepath.Join(f.Dir, names[i]), true
		}
	}
	return "", false
}

func names(files []File) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.String()
	}
	return out
}

// Run checks at once, then whenever a watched directory changes as
// described in the package comment, until ctx ends. The checks' failures
// are logged and tried again at the next change or Recheck. Where inotify
// cannot be used (no watch left), Run says so and checks every Recheck
// alone.
func (h *Healer) Run(ctx context.Context) {
	var events <-chan fsnotify.Event
	var failures <-chan error
	w, err := fsnotify.NewWatcher()
	if err != nil {
		h.log().Error("cannot watch the CDI spec directories: spec files that go are put back only at each re-check", "driver", h.Driver, "dirs", h.Dirs, "err", err)
	} else {
		defer w.Close()
		events, failures = w.Events, w.Errors
	}
	debounce, recheck := h.Debounce, h.Recheck
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	if recheck == 0 {
		recheck = DefaultRecheck
	}
	var safety <-chan time.Time
	if recheck > 0 {
		t := time.NewTicker(recheck)
		defer t.Stop()
		safety = t.C
	}
	var settle <-chan time.Time // set while a change waits for its check
	check := func() {
		settle = nil
		h.watch(w) // a directory made again needs its watch again
		n, err := h.Check(ctx)
		if err != nil && ctx.Err() == nil {
			h.log().Warn("checking CDI spec files", "driver", h.Driver, "err", err)
		}
		if n > 0 {
			h.watch(w) // the restore made the directory
		}
		if h.checked != nil {
			h.checked(n)
		}
	}
	check()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-events:
			if settle == nil && h.relevant(ev) {
				settle = time.After(debounce)
			}
		case err := <-failures:
			if !errors.Is(err, fsnotify.ErrEventOverflow) {
				h.log().Warn("watching CDI spec directories", "driver", h.Driver, "err", err)
			}
			if settle == nil {
				settle = time.After(debounce) // events were lost
			}
		case <-settle:
			check()
		case <-safety:
			check()
		}
	}
}

// watch watches each directory that exists, and the nearest existing
// directory above each, which sees it removed, renamed or made again.
// Watching a directory watched already changes nothing.
func (h *Healer) watch(w *fsnotify.Watcher) {
	if w == nil {
		return
	}
	for _, dir := range h.Dirs {
		dir = filepath.Clean(dir)
		if err := w.Add(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			h.log().Warn("cannot watch a CDI spec directory", "driver", h.Driver, "dir", dir, "err", err)
		}
		for up := filepath.Dir(dir); ; up = filepath.Dir(up) {
			if err := w.Add(up); err == nil || up == filepath.Dir(up) {
				break
			}
		}
	}
}

// relevant reports whether ev may have made a file missing: a spec file
// (not hidden, *.json) removed or renamed away in a watched directory, or
// anything that happened to a watched directory itself or to one above
// it. Files written (every prepare writes one) are not.
func (h *Healer) relevant(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	for _, dir := range h.Dirs {
		dir = filepath.Clean(dir)
		if name == dir || strings.HasPrefix(dir, name+string(filepath.Separator)) {
			return true
		}
		base := filepath.Base(name)
		if filepath.Dir(name) == dir && ev.Has(fsnotify.Remove|fsnotify.Rename) &&
			!strings.HasPrefix(base, ".") && strings.HasSuffix(base, ".json") {
			return true
		}
	}
	return false
}
