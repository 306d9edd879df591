package sysfs

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/internal/dirent"
)

// readFile reads a small file with plain system calls. Files are opened
// non-blocking, so that a FIFO planted where an attribute should be cannot
// hang the plugin. os.Open would also register every sysfs file with the
// runtime's poller; on the hot path, where a command reads a few hundred
// attributes, that doubles the calls. sysfs hands an attribute over in one
// read, as a regular file does up to its end, so a read that leaves room
// in the buffer is the end: there is no second read to see it.
func readFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 512) // attributes are short; sysfs reads a page at most
	n := 0
	for {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		n += m
		if m == 0 || n < len(buf) {
			return buf[:n], nil
		}
		buf = append(buf, make([]byte, len(buf))...)
	}
}

// readDirNames lists a directory's entry names (without "." and ".."),
// unsorted.
func readDirNames(path string) ([]string, error) {
	entries, err := readDirTypes(path)
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.name
	}
	return names, err
}

// entry is a directory entry: its name and the type the file system
// reports (unix.DT_*; DT_UNKNOWN when it reports none).
type entry struct {
	name string
	typ  uint8
}

// readDirTypes lists a directory with the entry types the file system
// reports, without a stat per entry.
func readDirTypes(path string) ([]entry, error) {
	var out []entry
	err := dirent.List(path, func(name []byte, _ uint64, typ uint8) {
		out = append(out, entry{name: string(name), typ: typ})
	})
	return out, err
}

// trim drops surrounding white space, as sysfs attributes end in a newline.
func trim(b []byte) string { return string(bytes.TrimSpace(b)) }

// Dir is an open sysfs directory. Attributes are read relative to it, so
// each read resolves one path component instead of the whole path, and
// opening it proves the directory exists (a class link may dangle).
type Dir struct {
	fd   int
	Path string
}

// OpenDir opens a directory for relative reads. Close it when done.
func OpenDir(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{fd: fd, Path: path}, nil
}

// Close releases the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Attr reads an attribute file in the directory, trimmed.
func (d *Dir) Attr(name string) (string, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: d.Path + "/" + name, Err: err}
	}
	defer unix.Close(fd)
	var buf [256]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil {
		return "", &os.PathError{Op: "read", Path: d.Path + "/" + name, Err: err}
	}
	return trim(buf[:n]), nil
}

// LinkBase returns the base name of the target of the symlink name in the
// directory (the driver of a device, the PF of a VF), or "" when there is
// no such link.
func (d *Dir) LinkBase(name string) string {
	t, err := readlinkat(d.fd, name)
	if err != nil {
		return ""
	}
	for len(t) > 1 && t[len(t)-1] == '/' {
		t = t[:len(t)-1]
	}
	if i := lastSlash(t); i >= 0 {
		return t[i+1:]
	}
	return t
}

// readlinkat reads a symbolic link. Links in sysfs are short: a small
// buffer first, a PATH_MAX one only when the link filled it (a buffer of
// PATH_MAX on the stack would make the runtime grow the goroutine's stack).
func readlinkat(dirfd int, name string) (string, error) {
	var small [256]byte
	n, err := unix.Readlinkat(dirfd, name, small[:])
	if err != nil || n < len(small) {
		return string(small[:max(n, 0)]), err
	}
	for size := 2 * len(small); size <= unix.PathMax; size *= 2 {
		buf := make([]byte, size)
		if n, err = unix.Readlinkat(dirfd, name, buf); err != nil || n < size {
			return string(buf[:max(n, 0)]), err
		}
	}
	return "", unix.ENAMETOOLONG
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

// NUMA reads numa_node: -1 when the kernel does not know it, the file is
// missing, or it does not hold an integer.
func (d *Dir) NUMA() int {
	s, err := d.Attr("numa_node")
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < -1 {
		return -1
	}
	return n
}
