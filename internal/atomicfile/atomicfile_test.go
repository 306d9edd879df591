package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
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
