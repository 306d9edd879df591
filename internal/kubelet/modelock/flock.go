package modelock

// This file holds the advisory file locks (flock(2)) with a wait bounded
// by a context that the mode locks and the DRA claim records
// (internal/kubelet/claimstate) are built on. Locks belong to the open
// file: two opens of one file conflict even within a process, and the
// kernel drops a lock when its file is closed or its process ends.

import (
	"context"
	"errors"
	"fmt"
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
	for delay := time.Millisecond; ; delay = min(2*delay, maxDelay) {
		ok, err := Try(f, kind)
		if ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is locked by another process: %w", f.Name(), context.Cause(ctx))
		case <-time.After(delay):
		}
	}
}

// OpenFile opens (creating, mode 0600) the lock file at path.
func OpenFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}
