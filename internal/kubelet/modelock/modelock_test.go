package modelock

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestAcquire(t *testing.T) {
	tests := []struct {
		name  string
		held  []string // mode:type held first, in order
		mode  string
		types []string
		ok    bool
	}{
		{"free", nil, DRA, []string{"tty"}, true},
		{"same mode again (rolling update)", []string{DRA + ":tty"}, DRA, []string{"tty"}, true},
		{"other mode on the type", []string{DevicePlugin + ":tty"}, DRA, []string{"tty"}, false},
		{"other mode on another type", []string{DevicePlugin + ":gpu"}, DRA, []string{"tty"}, true},
		{"other mode on one of the types", []string{DRA + ":gpu"}, DevicePlugin, []string{"tty", "gpu"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, h := range tt.held {
				mode, typ, _ := strings.Cut(h, ":")
				l, err := Acquire(t.Context(), dir, mode, []string{typ})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(l.Release)
			}
			l, err := Acquire(t.Context(), dir, tt.mode, tt.types)
			if tt.ok != (err == nil) {
				t.Fatalf("Acquire(%s, %v) = %v, want ok %v", tt.mode, tt.types, err, tt.ok)
			}
			if err != nil {
				if !errors.Is(err, ErrServed) {
					t.Fatalf("error %v is not ErrServed", err)
				}
				return
			}
			l.Release()
		})
	}
}

// TestAllOrNothing checks that a failed Acquire keeps none of the types:
// after it, the other mode can take the one that was free.
func TestAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	gpu, err := Acquire(t.Context(), dir, DRA, []string{"gpu"})
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Release()
	if _, err := Acquire(t.Context(), dir, DevicePlugin, []string{"tty", "gpu"}); !errors.Is(err, ErrServed) {
		t.Fatalf("device-plugin on tty and gpu: %v, want ErrServed", err)
	}
	tty, err := Acquire(t.Context(), dir, DRA, []string{"tty"})
	if err != nil {
		t.Fatalf("the failed Acquire kept tty: %v", err)
	}
	tty.Release()
}

// TestReleaseFrees checks that the other mode can serve a type once every
// holder of the first mode has released it.
func TestReleaseFrees(t *testing.T) {
	dir := t.TempDir()
	a, err := Acquire(t.Context(), dir, DRA, []string{"tty"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Acquire(t.Context(), dir, DRA, []string{"tty"})
	if err != nil {
		t.Fatal(err)
	}
	a.Release()
	if _, err := Acquire(t.Context(), dir, DevicePlugin, []string{"tty"}); !errors.Is(err, ErrServed) {
		t.Fatalf("with one DRA holder left: %v, want ErrServed", err)
	}
	b.Release()
	c, err := Acquire(t.Context(), dir, DevicePlugin, []string{"tty"})
	if err != nil {
		t.Fatalf("after every DRA holder released: %v", err)
	}
	c.Release()
}

// TestNeverBothModes races many acquisitions of both modes: at no time do
// holders of both modes exist.
func TestNeverBothModes(t *testing.T) {
	dir := t.TempDir()
	var holders [2]atomic.Int32
	modes := [2]string{DRA, DevicePlugin}
	var wg sync.WaitGroup
	var bad atomic.Int32
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				m := (g + i) % 2
				l, err := Acquire(t.Context(), dir, modes[m], []string{"tty"})
				if errors.Is(err, ErrServed) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				holders[m].Add(1)
				if holders[1-m].Load() > 0 {
					bad.Add(1)
				}
				holders[m].Add(-1)
				l.Release()
			}
		}()
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d times both modes held the type", n)
	}
}
