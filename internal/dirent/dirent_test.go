package dirent

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"unsafe"

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

// entry is one directory entry as Each reports it.
type entry struct {
	name string
	ino  uint64
	typ  uint8
}

// encode lays entries out as the kernel's getdents64 does: each record
// 8-byte aligned, the name NUL-terminated and padded with NULs.
func encode(entries []entry) []byte {
	var b []byte
	for i, e := range entries {
		reclen := (19 + len(e.name) + 1 + 7) &^ 7
		rec := make([]byte, reclen)
		binary.LittleEndian.PutUint64(rec, e.ino)
		binary.LittleEndian.PutUint64(rec[8:], uint64(i+1)) // d_off
		binary.LittleEndian.PutUint16(rec[16:], uint16(reclen))
		rec[18] = e.typ
		copy(rec[19:], e.name)
		b = append(b, rec...)
	}
	return b
}

// FuzzEach: names made of the input, laid out as the kernel does, come
// back from Each exactly, in order, with their inode numbers and types,
// "." and ".." left out; and any buffer at all is walked without a panic,
// every name coming from inside it, NUL-free and never longer than its
// record.
func FuzzEach(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 24, 0, 8, 'a', 'b', 0, 0, 0})
	f.Add([]byte("sub/./link/../file-with-a-long-name-001"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var in, want []entry
		for i, name := range bytes.Split(bytes.ReplaceAll(b, []byte{0}, nil), []byte{'/'}) {
			if len(name) == 0 || len(name) > 255 {
				continue
			}
			e := entry{name: string(name), ino: uint64(i)<<32 | 7, typ: uint8(i)}
			in = append(in, e)
			if e.name != "." && e.name != ".." {
				want = append(want, e)
			}
		}
		var got []entry
		Each(encode(in), func(name []byte, ino uint64, typ uint8) { got = append(got, entry{string(name), ino, typ}) })
		if !slices.Equal(got, want) {
			t.Fatalf("Each of %d encoded entries = %v, want %v", len(in), got, want)
		}

		start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		Each(b, func(name []byte, _ uint64, _ uint8) {
			if len(name) == 0 {
				return // an empty name has no place to check
			}
			at := uintptr(unsafe.Pointer(&name[0]))
			if at < start+19 || at+uintptr(len(name)) > start+uintptr(len(b)) {
				t.Fatalf("a name of %d bytes from outside the %d-byte buffer", len(name), len(b))
			}
			if bytes.IndexByte(name, 0) >= 0 {
				t.Fatalf("name %q holds a NUL", name)
			}
			if reclen := int(b[at-start-3]) | int(b[at-start-2])<<8; len(name) > reclen-19 {
				t.Fatalf("a name of %d bytes from a record of %d", len(name), reclen)
			}
		})
	})
}
