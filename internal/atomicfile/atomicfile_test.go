package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// temps lists the temporary files of pattern left in dir.
func temps(t *testing.T, dir, pattern string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// Write replaces the file with the mode asked for, whatever it was, and
// leaves no temporary file; with NoSync too.
func TestWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("old"), 0o666); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{Temp: "f.tmp-*", Perm: 0o644}, {Temp: "f.tmp-*", Perm: 0o600, NoSync: true}} {
		if err := WriteBytes(dir, "f", o, []byte("new")); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != o.Perm || read(t, p) != "new" {
			t.Fatalf("%+v: %v %v %q", o, fi.Mode(), err, read(t, p))
		}
		if left := temps(t, dir, o.Temp); len(left) != 0 {
			t.Errorf("temporary files left: %v", left)
		}
	}
}

// NoClobber keeps a file that is there, and links a new one only where
// the name is free.
func TestWriteNoClobber(t *testing.T) {
	dir := t.TempDir()
	o := Options{Temp: "f.new-*", Perm: 0o600, NoClobber: true}
	if err := WriteBytes(dir, "f", o, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := WriteBytes(dir, "f", o, []byte("second")); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(dir, "f")); got != "first" {
		t.Errorf("content %q, want the first", got)
	}
	if left := temps(t, dir, o.Temp); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// A fill that fails leaves the old file and no temporary file.
func TestWriteFillFails(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(dir, "f", Options{Temp: ".f.*", Perm: 0o600}, func(f *os.File) error {
		f.WriteString("half")
		return boom
	})
	if !errors.Is(err, boom) || read(t, p) != "old" {
		t.Fatalf("%v %q", err, read(t, p))
	}
	if left := temps(t, dir, ".f.*"); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// Sweep removes the pattern's stale regular files and nothing else: not a
// fresh one (a writer at work), not another pattern's, not a link, not a
// directory, not the file itself.
func TestSweep(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-StaleAge - time.Minute)
	files := map[string]bool{ // name → still there afterwards
		"f.tmp-1-2": false,
		"f.tmp-3-4": true, // fresh
		"g.tmp-1-2": true,
		"f.tmp-":    true, // no unique part: not a temporary file of Write
		"f":         true,
	}
	for name := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if name != "f.tmp-3-4" {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Symlink("nowhere", filepath.Join(dir, "f.tmp-5-6")); err != nil {
		t.Fatal(err)
	}
	files["f.tmp-5-6"] = true
	if err := os.Mkdir(filepath.Join(dir, "f.tmp-7-8"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(dir, "f.tmp-7-8"), old, old); err != nil {
		t.Fatal(err)
	}
	files["f.tmp-7-8"] = true
	Sweep(dir, "f.tmp-*")
	for name, want := range files {
		if _, err := os.Lstat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s: present = %v, want %v", name, err == nil, want)
		}
	}
}

// names lists dir, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// A Pending places the new file with its mode over the old one, leaves no
// temporary file, and syncs after: with the unnamed file Open makes, and
// with the named one Place makes where there is none (a file system
// without O_TMPFILE). Until Place, the directory shows nothing of it.
func TestPending(t *testing.T) {
	for _, named := range []bool{false, true} {
		dir := t.TempDir()
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		w, err := Open(dir, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if !named && w.f == nil {
			t.Log("no unnamed file: the test's temporary directory has no O_TMPFILE; both cases run named")
		}
		if named && w.f != nil {
			w.f.Close()
			w.f = nil
		}
		if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
			t.Errorf("named=%v: before Place the directory holds %v", named, got)
		}
		listed, err := w.Names()
		if err != nil || !slices.Equal(listed, []string{"f"}) {
			t.Errorf("named=%v: Names = %v, %v", named, listed, err)
		}
		if err := w.Place("f", ".f.tmp-*", []byte("new")); err != nil {
			t.Fatalf("named=%v: %v", named, err)
		}
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o644 || read(t, p) != "new" {
			t.Errorf("named=%v: %v %v %q", named, fi.Mode(), err, read(t, p))
		}
		if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
			t.Errorf("named=%v: after Place the directory holds %v", named, got)
		}
		if err := w.Place("g", ".f.tmp-*", []byte("again")); err == nil {
			t.Errorf("named=%v: a second Place succeeded", named)
		}
		if err := w.Sync(); err != nil {
			t.Errorf("named=%v: Sync: %v", named, err)
		}
		if !w.Placed() {
			t.Errorf("named=%v: the placed file is not Placed", named)
		}
		if err := w.Close(); err != nil {
			t.Error(err)
		}
		if err := w.Sync(); err == nil {
			t.Errorf("named=%v: Sync after Close succeeded", named)
		}
	}
}

// An unnamed file that is never placed leaves nothing; Sync without Place
// is an error.
func TestPendingUnplaced(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err == nil {
		t.Error("Sync before Place succeeded")
	}
	if ok, err := w.Withdraw(); ok || err != nil {
		t.Errorf("Withdraw before Place = %v, %v", ok, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dir); len(got) != 0 {
		t.Errorf("the directory holds %v", got)
	}
	if _, err := Open(filepath.Join(dir, "missing"), 0o600); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open of a missing directory: %v", err)
	}
}

// A Place that fails (the name is a non-empty directory) leaves the name
// as it was and no temporary file, with either kind of temporary file.
func TestPendingPlaceFails(t *testing.T) {
	for _, named := range []bool{false, true} {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "f", "x"), 0o755); err != nil {
			t.Fatal(err)
		}
		w, err := Open(dir, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if named && w.f != nil {
			w.f.Close()
			w.f = nil
		}
		if err := w.Place("f", ".f.tmp-*", []byte("new")); err == nil {
			t.Errorf("named=%v: Place over a directory succeeded", named)
		}
		w.Close()
		if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
			t.Errorf("named=%v: the directory holds %v", named, got)
		}
	}
}

// Withdraw removes the placed file only while the name still holds it:
// not once another writer has replaced it, nor once it is gone.
func TestPendingWithdraw(t *testing.T) {
	tests := []struct {
		name    string
		after   func(t *testing.T, path string) // what happens to the name after Place
		removed bool                            // Withdraw removes the file
		left    string                          // the content left; "" for none
	}{
		{"untouched", func(*testing.T, string) {}, true, ""},
		{"replaced", func(t *testing.T, path string) {
			if err := WriteBytes(filepath.Dir(path), filepath.Base(path), Options{Temp: ".other-*", Perm: 0o600}, []byte("later")); err != nil {
				t.Fatal(err)
			}
		}, false, "later"},
		{"removed", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, false, ""},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		path := filepath.Join(dir, "f")
		w, err := Open(dir, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Place("f", ".f.tmp-*", []byte("mine")); err != nil {
			t.Fatal(err)
		}
		tt.after(t, path)
		ok, err := w.Withdraw()
		if ok != tt.removed || err != nil {
			t.Errorf("%s: Withdraw = %v, %v; want %v", tt.name, ok, err, tt.removed)
		}
		w.Close()
		b, err := os.ReadFile(path)
		if got := string(b); got != tt.left || (tt.left == "") != errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: left %q, %v; want %q", tt.name, got, err, tt.left)
		}
	}
}

// SweepListed and Pending.Sweep remove what Sweep would, from a listing
// made elsewhere: only what was listed.
func TestSweepListed(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-StaleAge - time.Minute)
	for _, name := range []string{"f.tmp-1-2", "f.tmp-3-4", "g.tmp-1-2"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	// f.tmp-3-4 is left out of the listing: only what was listed goes.
	SweepListed(dir, "f.tmp-*", []string{"f.tmp-1-2", "g.tmp-1-2"})
	if got := names(t, dir); !slices.Equal(got, []string{"f.tmp-3-4", "g.tmp-1-2"}) {
		t.Errorf("left %v", got)
	}
	w, err := Open(dir, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Sweep("f.tmp-*", []string{"f.tmp-3-4", "g.tmp-1-2"})
	if got := names(t, dir); !slices.Equal(got, []string{"g.tmp-1-2"}) {
		t.Errorf("left %v", got)
	}
}
