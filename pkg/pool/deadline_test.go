package pool

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The lazy deadline behaves as context.WithDeadline: Err and Deadline
// before and after the time, Done closing at it, cancel, and a parent's
// end passed down, whether or not Done was ever called.
func TestDeadline(t *testing.T) {
	for _, waited := range []bool{false, true} {
		future, cancel := withDeadline(context.Background(), time.Now().Add(time.Hour))
		past, cancelPast := withDeadline(context.Background(), time.Now().Add(-time.Second))
		if waited {
			future.Done()
		}
		if err := future.Err(); err != nil {
			t.Fatalf("waited=%v: Err before the deadline = %v", waited, err)
		}
		if d, ok := future.Deadline(); !ok || time.Until(d) < 59*time.Minute {
			t.Fatalf("Deadline = %v %v", d, ok)
		}
		if err := past.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waited=%v: Err after = %v", waited, err)
		}
		<-past.Done()
		cancelPast()
		if err := past.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancel after the deadline changed Err to %v", err)
		}
		cancel()
	}
	ctx, cancel := withDeadline(context.Background(), time.Now().Add(time.Hour))
	cancel()
	if err := ctx.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after cancel = %v", err)
	}
	select {
	case <-ctx.Done():
	default:
		t.Fatal("Done of a canceled context is open")
	}
	parent, cancelParent := context.WithCancel(context.Background())
	child, cancelChild := withDeadline(parent, time.Now().Add(time.Hour))
	defer cancelChild()
	grandchild, cancelGrandchild := withDeadline(child, time.Now().Add(time.Hour))
	defer cancelGrandchild()
	cancelParent()
	if err := grandchild.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("a parent's cancel did not reach: %v", err)
	}
	<-grandchild.Done()
	early, cancelEarly := context.WithTimeout(context.Background(), time.Minute)
	defer cancelEarly()
	late, cancelLate := withDeadline(early, time.Now().Add(time.Hour))
	defer cancelLate()
	if d, _ := late.Deadline(); time.Until(d) > time.Minute {
		t.Fatalf("Deadline %v is later than the parent's", d)
	}
}
