package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/test/proclocks"
)

// waitBlocked waits until n opens wait in the kernel for the lock of the
// file at path, and fails if an open of done returns first. A waiter that
// polled with non-blocking tries would never show there.
func waitBlocked(t *testing.T, path string, n int, done <-chan error) {
	t.Helper()
	for give := time.Now().Add(time.Minute); proclocks.Blocked(t, "FLOCK", path) < n; {
		select {
		case err := <-done:
			t.Fatalf("an open returned (err %v) while the lock was held", err)
		default:
		}
		if time.Now().After(give) {
			t.Fatalf("%d of %d opens wait in a blocking flock of %s after a minute", proclocks.Blocked(t, "FLOCK", path), n, path)
		}
		time.Sleep(time.Millisecond)
	}
}

// An open that meets a held store waits for it in the kernel and takes it
// as soon as the holder closes the store, well before its deadline (an
// hour): read-only opens share it with each other and wait for a writer,
// a writer waits for readers.
func TestLockWaiterWakesWhenFreed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		holder  bool   // the holder opens read-only
		waiters []bool // each waiter opens read-only
	}{
		{"writer waits for writer", false, []bool{false}},
		{"readers wait for writer", false, []bool{true, true}},
		{"writer waits for reader", true, []bool{false}},
		{"writers queue", false, []bool{false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := Path(t.TempDir(), "x")
			open(t, path).Close() // create it
			holder, err := Open(path, Options{ReadOnly: tc.holder, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, len(tc.waiters))
			for _, ro := range tc.waiters {
				go func() {
					s, err := Open(path, Options{ReadOnly: ro, Timeout: time.Hour})
					if err == nil {
						if ro {
							err = s.View(func(*Tx) error { return nil })
						} else {
							err = s.Update(func(tx *Tx) error { return tx.Put(rec("r", "d")) })
						}
						err = errors.Join(err, s.Close())
					}
					done <- err
				}()
			}
			waitBlocked(t, path, len(tc.waiters), done)
			if err := holder.Close(); err != nil {
				t.Fatal(err)
			}
			for range tc.waiters {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A waiter whose deadline passes is ErrBusy, and leaves no lock behind:
// once the holder closes the store, the next open takes it.
func TestLockWaiterGivesUp(t *testing.T) {
	for _, ro := range []bool{false, true} {
		t.Run(fmt.Sprintf("readOnly=%v", ro), func(t *testing.T) {
			path := Path(t.TempDir(), "x")
			holder := open(t, path)
			_, err := Open(path, Options{ReadOnly: ro, Timeout: time.Millisecond})
			if !errors.Is(err, ErrBusy) {
				t.Fatalf("err = %v, want ErrBusy", err)
			}
			if err := holder.Close(); err != nil {
				t.Fatal(err)
			}
			// The waiter that gave up still waits in the kernel until the
			// holder is gone, then lets go at once: this open waits for
			// that at most, never for the deadline.
			s, err := Open(path, Options{Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Update(func(tx *Tx) error { return tx.Put(rec("r", "d")) }); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
