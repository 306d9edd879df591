// Package dirent lists directories with getdents64: each entry's name,
// inode number and type as the file system reports them, without a stat
// and without an allocation per entry. sysfs discovery, the discovery
// cache's stamps and the sweep of temporary files (internal/atomicfile) list
// directories this way.
package dirent

import (
	"bytes"
	"encoding/binary"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// List calls fn for every entry of a directory (without "." and ".."),
// in the order the file system lists them, with its inode number and the
// type it reports (unix.DT_*). name is only valid during the call. The
// directory is read with getdents64: no stat, no allocation per entry.
func List(path string, fn func(name []byte, ino uint64, typ uint8)) error {
	recs, err := Read(path)
	if err != nil {
		return err
	}
	Each(recs, fn)
	return nil
}

// ListFD is List for a directory already open (for reading, at its
// start); it reads the descriptor to its end and does not close it.
func ListFD(fd int, path string, fn func(name []byte, ino uint64, typ uint8)) error {
	recs, err := readFD(fd, path)
	if err != nil {
		return err
	}
	Each(recs, fn)
	return nil
}

// Read reads a directory's raw getdents64 records.
func Read(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return readFD(fd, path)
}

// readFD reads the records of an open directory; path is for errors.
func readFD(fd int, path string) ([]byte, error) {
	buf := make([]byte, 0, 2<<10) // grows for large directories
	for {
		if cap(buf)-len(buf) < 1024 {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := unix.ReadDirent(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "readdirent", Path: path, Err: err}
		}
		if n <= 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// Each walks the records of a getdents64 buffer: struct
// linux_dirent64 is ino u64, off s64, reclen u16, type u8, then the name,
// each number in the machine's own byte order.
func Each(b []byte, fn func(name []byte, ino uint64, typ uint8)) {
	for len(b) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < 19 || reclen > len(b) {
			return
		}
		name := b[19:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		if !(len(name) == 1 && name[0] == '.' || len(name) == 2 && name[0] == '.' && name[1] == '.') {
			fn(name, binary.NativeEndian.Uint64(b[0:8]), b[18])
		}
		b = b[reclen:]
	}
}
