package dirent

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// List and ListFD give every entry once, with the inode number and type
// stat gives, and never "." or ".."; a directory too large for the first
// buffer is read whole.
func TestList(t *testing.T) {
	dir := t.TempDir()
	want := map[string]uint8{"sub": unix.DT_DIR, "link": unix.DT_LNK}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		name := fmt.Sprintf("file-with-a-long-name-%03d", i)
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want[name] = unix.DT_REG
	}
	check := func(how string, list func(func([]byte, uint64, uint8)) error) {
		got := map[string]bool{}
		err := list(func(name []byte, ino uint64, typ uint8) {
			n := string(name)
			fi, err := os.Lstat(filepath.Join(dir, n))
			if err != nil || got[n] || want[n] != typ || fi.Sys().(*syscall.Stat_t).Ino != ino {
				t.Errorf("%s: entry %q ino %d type %d (stat %v, %v)", how, n, ino, typ, fi, err)
			}
			got[n] = true
		})
		if err != nil || len(got) != len(want) {
			t.Errorf("%s: %d entries of %d, %v", how, len(got), len(want), err)
		}
	}
	check("List", func(fn func([]byte, uint64, uint8)) error { return List(dir, fn) })
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	check("ListFD", func(fn func([]byte, uint64, uint8)) error { return ListFD(fd, dir, fn) })
	if err := List(filepath.Join(dir, "missing"), func([]byte, uint64, uint8) {}); !os.IsNotExist(err) {
		t.Errorf("a missing directory: %v", err)
	}
}

// FuzzEach: any buffer is walked without a panic, and only names that
// lie inside it come out.
func FuzzEach(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 24, 0, 8, 'a', 'b', 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		Each(b, func(name []byte, _ uint64, _ uint8) {
			if len(name) > len(b) {
				t.Fatalf("name of %d bytes from %d", len(name), len(b))
			}
		})
	})
}
