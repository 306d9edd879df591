package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/internal/filelock"
)

// The state directory and the store file are reached without following
// symbolic links and without path checks that could race: the directory is
// opened with O_NOFOLLOW and checked through its descriptor, and everything
// in it is opened relative to that descriptor, again with O_NOFOLLOW. bbolt
// opens files by name, so Options.OpenFile hands it the descriptor opened
// here instead (see dir.openFile). The checks follow sshd's StrictModes:
// whatever decides where allocations are written must belong to the
// effective user and be writable by nobody else.

// dir is an open, checked state directory.
type dir struct {
	fd   int
	path string
	euid uint32 // the effective user, who must own the directory and the store
}

// openDir opens the state directory of path and checks it. With create, a
// missing directory is made 0700 first (its parents as needed).
func openDir(path string, create bool) (*dir, error) {
	if err := absolute(path); err != nil {
		return nil, err
	}
	name := filepath.Dir(path)
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Open(name, flags, 0)
	if err == unix.ENOENT && create {
		// Only a missing directory is made: one that is there is opened
		// at once, without a stat of its parent and a mkdir.
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return nil, fmt.Errorf("creating state directory: %w", err)
		}
		if err := unix.Mkdir(name, 0o700); err != nil && err != unix.EEXIST {
			return nil, fmt.Errorf("creating state directory: %w", &os.PathError{Op: "mkdir", Path: name, Err: err})
		}
		fd, err = unix.Open(name, flags, 0)
	}
	switch {
	case err == unix.ENOENT:
		return nil, fmt.Errorf("%s: %w", path, ErrNotExist)
	case err == unix.ELOOP || err == unix.ENOTDIR:
		if fi, lerr := os.Lstat(name); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			return nil, linkedDir(name)
		}
		return nil, notDir(name)
	case err != nil:
		return nil, fmt.Errorf("opening state directory: %w", &os.PathError{Op: "open", Path: name, Err: err})
	}
	d := &dir{fd: fd, path: name, euid: uint32(os.Geteuid())}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		d.close()
		return nil, &os.PathError{Op: "fstat", Path: name, Err: err}
	}
	if err := checkOwner(name, &st, "0700", d.euid); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *dir) close() { _ = unix.Close(d.fd) }

// refuse returns an ErrUnsafe error that says what is wrong with name and
// how to fix it.
func refuse(name, what, fix string) error {
	return fmt.Errorf("%s %s: %w; %s", name, what, ErrUnsafe, fix)
}

// absolute refuses a store path that is relative to the working directory.
func absolute(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%s: %w: the store path must be absolute, not relative to the working directory", path, ErrUnsafe)
	}
	return nil
}

// linkedDir and notDir refuse a state directory that is a symbolic link or
// not a directory.
func linkedDir(name string) error {
	return refuse(name, "is a symbolic link", "replace it by a real directory (mkdir -m 0700)")
}

func notDir(name string) error {
	return refuse(name, "is not a directory", "remove it, or point CDI_STATE_DIR elsewhere")
}

// checkOwner refuses a file or directory that another user than euid owns
// or that the group or others may write.
func checkOwner(name string, st *unix.Stat_t, mode string, euid uint32) error {
	if st.Uid != euid {
		return refuse(name, fmt.Sprintf("is owned by uid %d, not by uid %d that runs the plugin", st.Uid, euid),
			fmt.Sprintf("chown %d %s, or point CDI_STATE_DIR at a directory of that user", euid, name))
	}
	if st.Mode&0o022 != 0 {
		return refuse(name, fmt.Sprintf("is writable by its group or others (mode %04o)", st.Mode&0o7777),
			fmt.Sprintf("chmod %s %s", mode, name))
	}
	return nil
}

// stat looks at the store file without following a link. It reports false
// when there is no such file.
func (d *dir) stat(base string) (unix.Stat_t, bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(d.fd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.ENOENT {
		return st, false, nil
	}
	if err != nil {
		return st, false, &os.PathError{Op: "stat", Path: filepath.Join(d.path, base), Err: err}
	}
	return st, true, checkFile(filepath.Join(d.path, base), &st, d.euid)
}

// checkFile refuses anything but a non-empty regular file of euid's.
func checkFile(name string, st *unix.Stat_t, euid uint32) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		return refuse(name, "is a symbolic link", "a store is never a link; remove the link")
	default:
		return fmt.Errorf("%s is not a regular file: %w", name, ErrCorrupt)
	}
	if err := checkOwner(name, st, "0600", euid); err != nil {
		return err
	}
	if st.Size == 0 {
		return fmt.Errorf("%s is empty: %w; a store is built in full before it is put in place, "+
			"so an empty file is damage, and it was left untouched. Restore it from a backup, or move it "+
			"aside to start afresh (every allocation it recorded is then forgotten)", name, ErrCorrupt)
	}
	return nil
}

// opener is the bbolt OpenFile hook of one Open: it opens the checked
// store file relative to the directory, never creating it and never
// following a link, locks it itself, bounded by timeout, and checks the
// file it got under the lock, so that what bbolt reads and locks is the
// file that was checked; bbolt's own lock on the same open file then
// succeeds at once. It checks what bbolt.Open will read of the file
// (precheck) and leaves the walk of the page graph to Open (checkMapped).
type opener struct {
	dir     *dir
	base    string
	timeout time.Duration
	size    int64 // the file's size under the lock
}

func (o *opener) open(name string, flag int, _ os.FileMode) (*os.File, error) {
	flag = flag&^os.O_CREATE | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(o.dir.fd, o.base, flag, 0)
	switch {
	case err == unix.ELOOP:
		return nil, refuse(name, "is a symbolic link", "a store is never a link; remove the link")
	case err == unix.ENOENT:
		return nil, fmt.Errorf("%s: %w", name, ErrNotExist)
	case err != nil:
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	if err := o.lockAndCheck(f, flag&(os.O_RDWR|os.O_WRONLY) != 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// lockAndCheck locks the opened store file (exclusively for writing)
// within the timeout, checks it, and checks what bbolt.Open will read.
func (o *opener) lockAndCheck(f *os.File, exclusive bool) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	if err := lockFile(f, how, o.timeout); err != nil {
		return err
	}
	// Checked once, under the lock: the file is the one opened, and its
	// size cannot change while the lock is held.
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	if err := checkFile(f.Name(), &st, o.dir.euid); err != nil {
		return err
	}
	o.size = st.Size
	return precheck(f, st.Size)
}

// lockFile takes the flock(2) lock how (LOCK_SH or LOCK_EX) of f, waiting
// at most timeout; a lock still held by another open file then is ErrBusy.
// A store is held for the few milliseconds of one transaction, and the
// ADDs of claims prepared at once queue on one store, so a waiter waits
// in the kernel and takes the lock the moment it is freed
// (internal/filelock), rather than at its next try.
func lockFile(f *os.File, how int, timeout time.Duration) error {
	if ok, err := filelock.TryFlock(f, how); ok || err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := filelock.Flock(ctx, f, how)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w (waited %v for its lock)", f.Name(), ErrBusy, timeout)
	}
	return err
}

// tempPattern names the temporary files a store is built in
// (atomicfile.Options.Temp).
func tempPattern(base string) string { return base + ".new-*" }
