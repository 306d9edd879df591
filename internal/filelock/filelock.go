// Package filelock takes advisory locks of open files, flock(2) locks and
// fcntl(2) open file description locks of one byte, waiting in the kernel
// until the lock is free or a context ends. A waiter takes the lock the
// moment its holder frees it, rather than at its next try.
//
// Locks belong to the open file: two opens of one file conflict even
// within a process, and the kernel drops a lock when its file is closed
// or its process ends.
package filelock

import (
	"context"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// The kinds of flock(2) lock.
const (
	Shared    = unix.LOCK_SH
	Exclusive = unix.LOCK_EX
)

// Flock takes the flock(2) lock of kind (Shared or Exclusive) of f,
// waiting until ctx ends. It fails with an error wrapping ctx's cause
// when ctx ends first.
func Flock(ctx context.Context, f *os.File, kind int) error {
	return wait(ctx, f, flock{kind})
}

// TryFlock takes the flock(2) lock of kind of f if no other open file
// holds a conflicting one, and reports whether it did.
func TryFlock(f *os.File, kind int) (bool, error) {
	ok, err := flock{kind}.try(int(f.Fd()))
	return ok, wrap(f, flock{kind}, err)
}

// OpenFile opens (creating, mode 0600) the lock file at path.
func OpenFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}

// LockByte takes an exclusive open file description lock (fcntl(2)
// F_OFD_SETLKW) of the one byte at off of f, waiting until ctx ends.
// Locks of different bytes do not conflict.
func LockByte(ctx context.Context, f *os.File, off int64) error {
	return wait(ctx, f, byteLock{off})
}

// UnlockByte releases f's lock of the byte at off, if it holds one.
// Closing f releases its locks only once no other descriptor of the
// file is open, and a wait that ended with its context keeps one until
// it gets its byte: a caller that gives up after taking some bytes
// releases them itself.
func UnlockByte(f *os.File, off int64) error {
	return wrap(f, byteLock{off}, byteLock{off}.set(int(f.Fd()), unix.F_OFD_SETLK, unix.F_UNLCK))
}

// lock is one kind of lock: taken at once or not (try), taken waiting in
// the kernel (block), and released; each on a descriptor of the file.
type lock interface {
	try(fd int) (bool, error)
	block(fd int) error
	release(fd int)
	String() string
}

// wait takes l on f. A lock not free at once is waited for in a blocking
// call on a duplicate of f's descriptor (the same open file, so the lock
// it takes is f's), made by a goroutine while this one waits for it or
// for ctx. A waiter that gives up leaves the goroutine behind; when it
// gets the lock at last, it releases it and closes the duplicate, which
// keeps the open file until then, so the lock never outlives the wait.
func wait(ctx context.Context, f *os.File, l lock) error {
	fd := int(f.Fd())
	ok, err := l.try(fd)
	if ok || err != nil {
		return wrap(f, l, err)
	}
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("%s is locked (%s) by another process or call: %w", f.Name(), l, err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "dup", Path: f.Name(), Err: err}
	}
	got := make(chan error)        // the blocking call's result, to a waiter still there
	abandon := make(chan struct{}) // closed when the waiter gives up
	go func() {
		err := l.block(dup)
		select {
		case got <- err:
		case <-abandon:
			if err == nil {
				l.release(dup)
			}
		}
		// f's descriptor keeps the open file, and with it the lock, of a
		// waiter that took it.
		_ = unix.Close(dup)
	}()
	select {
	case err := <-got:
		return wrap(f, l, err)
	case <-ctx.Done():
		close(abandon)
		return fmt.Errorf("%s is locked (%s) by another process or call: %w", f.Name(), l, context.Cause(ctx))
	}
}

// wrap names the file and the lock in a failure of the lock call.
func wrap(f *os.File, l lock, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s of %s: %w", l, f.Name(), err)
}

// flock is a flock(2) lock of kind LOCK_SH or LOCK_EX.
type flock struct{ kind int }

func (l flock) try(fd int) (bool, error) {
	switch err := retryEINTR(func() error { return unix.Flock(fd, l.kind|unix.LOCK_NB) }); err {
	case nil:
		return true, nil
	case unix.EWOULDBLOCK:
		return false, nil
	default:
		return false, err
	}
}

func (l flock) block(fd int) error {
	return retryEINTR(func() error { return unix.Flock(fd, l.kind) })
}

func (l flock) release(fd int) { _ = unix.Flock(fd, unix.LOCK_UN) }

func (l flock) String() string {
	if l.kind == unix.LOCK_SH {
		return "flock shared"
	}
	return "flock exclusive"
}

// byteLock is an exclusive open file description lock of the byte at off.
type byteLock struct{ off int64 }

func (l byteLock) set(fd, cmd int, typ int16) error {
	lk := unix.Flock_t{Type: typ, Whence: io.SeekStart, Start: l.off, Len: 1}
	return retryEINTR(func() error { return unix.FcntlFlock(uintptr(fd), cmd, &lk) })
}

func (l byteLock) try(fd int) (bool, error) {
	switch err := l.set(fd, unix.F_OFD_SETLK, unix.F_WRLCK); err {
	case nil:
		return true, nil
	case unix.EAGAIN, unix.EACCES:
		return false, nil
	default:
		return false, err
	}
}

func (l byteLock) block(fd int) error { return l.set(fd, unix.F_OFD_SETLKW, unix.F_WRLCK) }

func (l byteLock) release(fd int) { _ = l.set(fd, unix.F_OFD_SETLK, unix.F_UNLCK) }

func (l byteLock) String() string { return fmt.Sprintf("fcntl lock at byte %d", l.off) }

// retryEINTR runs call again while a signal interrupts it.
func retryEINTR(call func() error) error {
	for {
		if err := call(); err != unix.EINTR {
			return err
		}
	}
}
