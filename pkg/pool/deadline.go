package pool

import (
	"context"
	"sync"
	"time"
)

// deadline is context.WithDeadline that starts its timer only when
// something waits on Done. A plugin process lives for a few milliseconds,
// and in most ADDs and DELs nothing waits on the hold deadline: only a
// hook that blocks (a delegate, a sysfs write) does. The first runtime
// timer of a process sets up the runtime's poller (an epoll instance and
// an eventfd) and wakes a thread to watch it, which costs a plain ADD or
// DEL several percent. Err and Deadline answer from the clock without a
// timer.
type deadline struct {
	parent context.Context
	at     time.Time

	mu       sync.Mutex
	ctx      context.Context // the real one, once Done was called
	cancel   context.CancelFunc
	canceled bool
}

// withDeadline returns a context that ends at the earlier of at and
// parent's end.
func withDeadline(parent context.Context, at time.Time) (context.Context, context.CancelFunc) {
	d := &deadline{parent: parent, at: at}
	return d, d.stop
}

func (d *deadline) Deadline() (time.Time, bool) {
	if p, ok := d.parent.Deadline(); ok && p.Before(d.at) {
		return p, true
	}
	return d.at, true
}

// Done starts the real context, timer and all.
func (d *deadline) Done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil {
		d.ctx, d.cancel = context.WithDeadline(d.parent, d.at)
		if d.canceled {
			d.cancel()
		}
	}
	return d.ctx.Done()
}

func (d *deadline) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err()
}

// err is Err with d.mu held.
func (d *deadline) err() error {
	switch {
	case d.ctx != nil:
		return d.ctx.Err()
	case d.canceled:
		return context.Canceled
	}
	if err := d.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(d.at) {
		return context.DeadlineExceeded
	}
	return nil
}

func (d *deadline) Value(key any) any { return d.parent.Value(key) }

// stop is the CancelFunc.
func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil && d.err() == nil {
		d.canceled = true
	}
	if d.cancel != nil {
		d.cancel()
	}
}
