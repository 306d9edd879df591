package sysfs

import (
	"bytes"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// readFile reads a small file with plain system calls. os.Open would also
// register every sysfs file with the runtime's poller; on the hot path,
// where a command reads a few hundred attributes, that doubles the calls.
func readFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	n := 0
	for {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
	}
}

// readDirNames lists a directory's entries (without "." and ".."), unsorted.
func readDirNames(path string) ([]string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 16<<10)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "readdirent", Path: path, Err: err}
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
	}
}

// dirent is a directory entry: its name and whether it is a directory.
type dirent struct {
	name string
	dir  bool
}

// readDirTypes lists a directory with the entry types the file system
// reports, without a stat per entry.
func readDirTypes(path string) ([]dirent, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var out []dirent
	buf := make([]byte, 16<<10)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "readdirent", Path: path, Err: err}
		}
		if n <= 0 {
			return out, nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(b[16]) | int(b[17])<<8
			if reclen < 19 || reclen > len(b) {
				break
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." {
				out = append(out, dirent{name: s, dir: b[18] == unix.DT_DIR})
			}
			b = b[reclen:]
		}
	}
}

// trim drops surrounding white space, as sysfs attributes end in a newline.
func trim(b []byte) string { return string(bytes.TrimSpace(b)) }
