// Package modelock makes sure that a resource type is served to
// Kubernetes by at most one mode of cdi-kubelet-plugin at a time (the
// device-plugin mode or the DRA mode), across processes and pods.
//
// Every process of a mode holds a shared lock on one file per type it
// serves, <dir>/<type>.<mode>.lock, for as long as it runs: instances of
// the same mode (two pods during a rolling update) can hold it together.
// Before it takes its own lock, a process checks, under a short exclusive
// lock on <dir>/<type>.gate, that it can take every other mode's file
// exclusively, which holds only when no process of that mode runs. The
// kernel drops the locks of a process that ends, however it ends.
//
// dir is the plugins' state directory (CDI_STATE_DIR): both modes must
// share it anyway, because the plugins' stores there decide who holds a
// device.
//
// The locks are flock(2) locks (internal/filelock).
package modelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cdi-exec/plugins/internal/filelock"
)

// The modes.
const (
	DevicePlugin = "device-plugin"
	DRA          = "dra"
)

// Subdir is the directory under the state directory that holds the
// lock files.
const Subdir = "kubernetes"

// gateWait bounds the wait for a type's gate, which others hold only
// for a few system calls.
const gateWait = 10 * time.Second

// Lock is what one process holds.
type Lock struct {
	files []*os.File
}

// ErrServed is returned when another mode serves a type.
var ErrServed = errors.New("served by another mode")

// Acquire takes mode's lock on every type, or none of them. It fails with
// ErrServed when a process of another mode serves one of the types.
func Acquire(ctx context.Context, dir, mode string, types []string) (*Lock, error) {
	if !slices.Contains([]string{DevicePlugin, DRA}, mode) {
		return nil, fmt.Errorf("modelock: unknown mode %q", mode)
	}
	dir = filepath.Join(dir, Subdir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("modelock: %w", err)
	}
	l := &Lock{}
	for _, t := range types {
		f, err := acquire(ctx, dir, mode, t)
		if err != nil {
			l.Release()
			return nil, err
		}
		l.files = append(l.files, f)
	}
	return l, nil
}

// Release drops the locks.
func (l *Lock) Release() {
	for _, f := range l.files {
		f.Close()
	}
	l.files = nil
}

// acquire takes mode's shared lock on typ under the type's gate, after
// checking that no other mode holds its lock.
func acquire(ctx context.Context, dir, mode, typ string) (*os.File, error) {
	gate, err := filelock.OpenFile(filepath.Join(dir, typ+".gate"))
	if err != nil {
		return nil, fmt.Errorf("modelock: %w", err)
	}
	defer gate.Close()
	ctx, cancel := context.WithTimeout(ctx, gateWait)
	defer cancel()
	if err := filelock.Flock(ctx, gate, filelock.Exclusive); err != nil {
		return nil, fmt.Errorf("modelock: %w", err)
	}
	for _, other := range []string{DevicePlugin, DRA} {
		if other == mode {
			continue
		}
		if err := probe(filepath.Join(dir, typ+"."+other+".lock")); err != nil {
			return nil, fmt.Errorf("resource type %q: %w: the %s mode runs on this node (%w)", typ, ErrServed, other, err)
		}
	}
	own, err := filelock.OpenFile(filepath.Join(dir, typ+"."+mode+".lock"))
	if err != nil {
		return nil, fmt.Errorf("modelock: %w", err)
	}
	// Only processes of this mode hold it, shared, or another mode's
	// probe, exclusive, under the gate we hold: it is free to share.
	if ok, err := filelock.TryFlock(own, filelock.Shared); !ok {
		own.Close()
		return nil, fmt.Errorf("modelock: %s is locked exclusively (%v)", own.Name(), err)
	}
	return own, nil
}

// probe fails when some process holds a lock on the file at path.
func probe(path string) error {
	f, err := filelock.OpenFile(path)
	if err != nil {
		return err
	}
	defer f.Close()
	ok, err := filelock.TryFlock(f, filelock.Exclusive)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s is locked", path)
	}
	return nil
}
