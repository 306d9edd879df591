package filelock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/test/proclocks"
)

func open(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// kinds are the locks the tests take, each on its own open of a file.
var kinds = []struct {
	name  string
	class string // /proc/locks' name of it
	take  func(ctx context.Context, f *os.File) error
}{
	{"flock", "FLOCK", func(ctx context.Context, f *os.File) error { return Flock(ctx, f, Exclusive) }},
	{"byte", "OFDLCK", func(ctx context.Context, f *os.File) error { return LockByte(ctx, f, 7) }},
}

// Waiters wait in the kernel, each on an open of its own, and take the
// lock one after another as it is freed, well before their deadline.
func TestWaitersWakeWhenFreed(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "l")
			holder := open(t, path)
			if err := k.take(t.Context(), holder); err != nil {
				t.Fatal(err)
			}
			const waiters = 3
			ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
			defer cancel()
			got := make(chan *os.File, waiters)
			errs := make(chan error, waiters)
			for range waiters {
				f := open(t, path)
				go func() {
					if err := k.take(ctx, f); err != nil {
						errs <- err
						return
					}
					got <- f
				}()
			}
			for give := time.Now().Add(time.Minute); proclocks.Blocked(t, k.class, path) < waiters; time.Sleep(time.Millisecond) {
				select {
				case f := <-got:
					t.Fatalf("%s was taken while the lock was held", f.Name())
				case err := <-errs:
					t.Fatal(err)
				default:
				}
				if time.Now().After(give) {
					t.Fatalf("%d of %d waiters block in the kernel after a minute", proclocks.Blocked(t, k.class, path), waiters)
				}
			}
			holder.Close()
			for i := range waiters {
				select {
				case f := <-got:
					f.Close() // the next waiter's turn
				case err := <-errs:
					t.Fatalf("waiter %d: %v", i, err)
				}
			}
		})
	}
}

// A waiter whose context ends fails with the context's cause and leaves
// no lock behind: once the holder lets go, another open takes it.
func TestWaiterGivesUp(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "l")
			holder, waiter := open(t, path), open(t, path)
			if err := k.take(t.Context(), holder); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
			defer cancel()
			if err := k.take(ctx, waiter); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want the deadline", err)
			}
			ended, cancelEnded := context.WithCancel(t.Context())
			cancelEnded()
			if err := k.take(ended, waiter); !errors.Is(err, context.Canceled) {
				t.Fatalf("with an ended context: err = %v, want canceled", err)
			}
			waiter.Close()
			holder.Close()
			// The waiters that gave up still wait in the kernel until the
			// holder is gone, then let go at once.
			ctx, cancel = context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if err := k.take(ctx, open(t, path)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Shared flocks share; an exclusive one waits for them. Byte locks of
// different bytes do not conflict, of one byte they do.
func TestConflicts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l")
	a, b := open(t, path), open(t, path)
	for _, tt := range []struct {
		f    *os.File
		kind int
		want bool
	}{{a, Shared, true}, {b, Shared, true}, {b, Exclusive, false}} {
		if ok, err := TryFlock(tt.f, tt.kind); ok != tt.want || err != nil {
			t.Fatalf("TryFlock(%s, %d) = %v, %v; want %v", tt.f.Name(), tt.kind, ok, err, tt.want)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := LockByte(ctx, a, 1); err != nil {
		t.Fatal(err)
	}
	if err := LockByte(ctx, b, 2); err != nil {
		t.Fatalf("another byte: %v", err)
	}
	short, cancelShort := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancelShort()
	if err := LockByte(short, b, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a byte another open file holds: err = %v, want the deadline", err)
	}
}
