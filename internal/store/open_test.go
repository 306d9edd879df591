package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listing returns every name under dir with its size, to prove that a
// refused open wrote nothing.
func listing(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d\n", p, fi.Mode(), fi.Size())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func rootOnly(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user (chown)")
	}
}

// A store path or state directory that is a symbolic link, not a regular
// file or directory, or not safely owned is refused, for writing and for
// reading, and nothing is written anywhere.
func TestOpenRefusesUnsafePaths(t *testing.T) {
	tests := []struct {
		name  string
		root  bool
		setup func(t *testing.T, top string) string // returns the store path
		want  error
		fix   string // words the error must contain
	}{
		{"store is a link to nowhere", false, func(t *testing.T, top string) string {
			mkdir(t, top+"/state", 0o700)
			symlink(t, top+"/elsewhere/x.db", top+"/state/x.db")
			return top + "/state/x.db"
		}, ErrUnsafe, "symbolic link"},
		{"store is a link to an empty file", false, func(t *testing.T, top string) string {
			mkdir(t, top+"/state", 0o700)
			write(t, top+"/victim", "", 0o600)
			symlink(t, top+"/victim", top+"/state/x.db")
			return top + "/state/x.db"
		}, ErrUnsafe, "symbolic link"},
		{"store is a link to a good store", false, func(t *testing.T, top string) string {
			mkdir(t, top+"/state", 0o700)
			s, err := Open(top+"/good.db", Options{})
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			symlink(t, top+"/good.db", top+"/state/x.db")
			return top + "/state/x.db"
		}, ErrUnsafe, "symbolic link"},
		{"state dir is a link", false, func(t *testing.T, top string) string {
			mkdir(t, top+"/real", 0o700)
			symlink(t, top+"/real", top+"/state")
			return top + "/state/x.db"
		}, ErrUnsafe, "symbolic link"},
		{"state dir is a file", false, func(t *testing.T, top string) string {
			write(t, top+"/state", "x", 0o600)
			return top + "/state/x.db"
		}, ErrUnsafe, "not a directory"},
		{"store is a fifo", false, func(t *testing.T, top string) string {
			mkdir(t, top+"/state", 0o700)
			if err := mkfifo(top + "/state/x.db"); err != nil {
				t.Fatal(err)
			}
			return top + "/state/x.db"
		}, ErrCorrupt, "not a regular file"},
		{"state dir world-writable", false, func(t *testing.T, top string) string {
			mkdir(t, top+"/state", 0o777)
			return top + "/state/x.db"
		}, ErrUnsafe, "chmod 0700"},
		{"state dir group-writable", false, func(t *testing.T, top string) string {
			mkdir(t, top+"/state", 0o770)
			return top + "/state/x.db"
		}, ErrUnsafe, "chmod 0700"},
		{"store writable by others", false, func(t *testing.T, top string) string {
			mkdir(t, top+"/state", 0o700)
			s, err := Open(top+"/state/x.db", Options{})
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			chmod(t, top+"/state/x.db", 0o666)
			return top + "/state/x.db"
		}, ErrUnsafe, "chmod 0600"},
		{"state dir owned by another user", true, func(t *testing.T, top string) string {
			mkdir(t, top+"/state", 0o700)
			chown(t, top+"/state", 65534)
			return top + "/state/x.db"
		}, ErrUnsafe, "chown 0"},
		{"store owned by another user", true, func(t *testing.T, top string) string {
			mkdir(t, top+"/state", 0o700)
			s, err := Open(top+"/state/x.db", Options{})
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			chown(t, top+"/state/x.db", 65534)
			return top + "/state/x.db"
		}, ErrUnsafe, "owned by uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				rootOnly(t)
			}
			top := t.TempDir()
			path := tt.setup(t, top)
			before := listing(t, top)
			for _, ro := range []bool{false, true} {
				s, err := Open(path, Options{ReadOnly: ro, Timeout: time.Second})
				if err == nil {
					s.Close()
					t.Fatalf("read-only %v: opened", ro)
				}
				if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.fix) {
					t.Fatalf("read-only %v: err = %v, want %v saying %q", ro, err, tt.want, tt.fix)
				}
			}
			if _, err := Probe(path); !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.fix) {
				t.Fatalf("Probe: err = %v, want %v saying %q", err, tt.want, tt.fix)
			}
			if after := listing(t, top); after != before {
				t.Fatalf("a refused open changed the tree:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

func TestRelativePathRefused(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, ro := range []bool{false, true} {
		if _, err := Open("state/x.db", Options{ReadOnly: ro}); !errors.Is(err, ErrUnsafe) {
			t.Fatalf("err = %v", err)
		}
	}
	if _, err := os.Stat("state"); !os.IsNotExist(err) {
		t.Fatal("a relative state dir was created")
	}
}

// An empty store file is damage: refused, for reading and writing, and left
// as it is.
func TestEmptyFileIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	path := Path(dir, "x")
	write(t, path, "", 0o600)
	for _, ro := range []bool{false, true} {
		if _, err := Open(path, Options{ReadOnly: ro}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "empty") {
			t.Fatalf("read-only %v: err = %v", ro, err)
		}
	}
	if _, err := Probe(path); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Probe: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("empty store touched: %v %v", fi.Size(), err)
	}
}

func TestProbeFresh(t *testing.T) {
	top := t.TempDir()
	if ok, err := Probe(top + "/none/x.db"); ok || err != nil {
		t.Fatal(ok, err)
	}
	mkdir(t, top+"/state", 0o700)
	if ok, err := Probe(top + "/state/x.db"); ok || err != nil {
		t.Fatal(ok, err)
	}
	open(t, top+"/state/x.db")
	if ok, err := Probe(top + "/state/x.db"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := os.Stat(top + "/none"); !os.IsNotExist(err) {
		t.Fatal("Probe created the state dir")
	}
}

// When another process linked its store first, create keeps that store
// and removes its own temporary file.
func TestCreateKeepsTheFirstStore(t *testing.T) {
	path := Path(t.TempDir(), "x")
	s := open(t, path)
	if err := s.Update(func(tx *Tx) error { return tx.Put(rec("a", "k1")) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	before, _ := os.ReadFile(path)
	d, err := openDir(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if err := d.create(filepath.Base(path)); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(path)
	if string(after) != string(before) {
		t.Fatal("create replaced an existing store")
	}
	if names, _ := filepath.Glob(path + ".new-*"); len(names) != 0 {
		t.Fatalf("temporary files left: %v", names)
	}
}

// A write open removes this store's temporary files once they are stale,
// and nothing else.
func TestSweepStaleTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	path := Path(dir, "x")
	old := time.Now().Add(-time.Hour)
	stale := path + ".new-123-456"
	fresh := path + ".new-124-457"
	other := Path(dir, "y") + ".new-125-458"
	link := path + ".new-126-459"
	for _, p := range []string{stale, fresh, other} {
		write(t, p, "half a store", 0o600)
	}
	symlink(t, dir+"/nowhere", link)
	for _, p := range []string{stale, other} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(path, Options{ReadOnly: true})
	if err == nil {
		s.Close()
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatal("a read-only open swept")
	}
	open(t, path)
	for p, want := range map[string]bool{stale: false, fresh: true, other: true, link: true} {
		if _, err := os.Lstat(p); (err == nil) != want {
			t.Errorf("%s: present = %v, want %v", filepath.Base(p), err == nil, want)
		}
	}
}

func mkdir(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(p, 0o700); err != nil {
		t.Fatal(err)
	}
	chmod(t, p, mode)
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.Lchown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func mkfifo(p string) error { return unix.Mkfifo(p, 0o600) }
