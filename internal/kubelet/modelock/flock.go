package modelock

// This file holds the advisory file locks (flock(2), and fcntl(2) locks of
// one byte) with a wait bounded by a context that the mode locks and the
// DRA claim records and claim locks (internal/kubelet/claimstate) are
// built on. Locks belong to the open file: two opens of one file conflict
// even within a process, and the kernel drops a lock when its file is
// closed or its process ends.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The kinds of lock.
const (
	Shared    = unix.LOCK_SH
	Exclusive = unix.LOCK_EX
)

// maxDelay bounds the pause between two tries.
const maxDelay = 50 * time.Millisecond

// Try takes a lock of kind on f if nobody holds a conflicting one, and
// reports whether it did.
func Try(f *os.File, kind int) (bool, error) {
	err := unix.Flock(int(f.Fd()), kind|unix.LOCK_NB)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return false, nil
	}
	return false, fmt.Errorf("flock %s: %w", f.Name(), err)
}

// Wait takes a lock of kind on f, trying again until ctx ends.
func Wait(ctx context.Context, f *os.File, kind int) error {
	return retry(ctx, f, func() (bool, error) { return Try(f, kind) })
}

// WaitByte takes an exclusive lock of the one byte at off of f (an open
// file description lock, fcntl(2) F_OFD_SETLK), trying again until ctx
// ends. Locks of different bytes do not conflict, and the lock belongs to
// the open file: two opens of one file conflict even within a process.
func WaitByte(ctx context.Context, f *os.File, off int64) error {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: off, Len: 1}
	return retry(ctx, f, func() (bool, error) {
		err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EACCES), errors.Is(err, unix.EINTR):
			return false, nil
		}
		return false, fmt.Errorf("fcntl lock %s at %d: %w", f.Name(), off, err)
	})
}

// retry runs try until it takes its lock, fails, or ctx ends, pausing
// 1 ms, then twice as long each time, up to maxDelay.
func retry(ctx context.Context, f *os.File, try func() (bool, error)) error {
	for delay := time.Millisecond; ; delay = min(2*delay, maxDelay) {
		ok, err := try()
		if ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is locked by another process or call: %w", f.Name(), context.Cause(ctx))
		case <-time.After(delay):
		}
	}
}

// OpenFile opens (creating, mode 0600) the lock file at path.
func OpenFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}
