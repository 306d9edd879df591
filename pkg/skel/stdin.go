package skel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds on reading the config from stdin.
const (
	maxConfigSize = 1 << 20
	stdinTimeout  = 30 * time.Second
)

// readStdin reads stdin, bounded in size and time: a caller that never
// closes stdin gets an error instead of a hung plugin.
func readStdin(ctx context.Context, r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, errors.New("no stdin")
	}
	if f, ok := r.(*os.File); ok {
		return readFD(ctx, int(f.Fd()))
	}
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, maxConfigSize+1))
		ch <- result{b, err}
	}()
	timer := time.NewTimer(stdinTimeout)
	defer timer.Stop()
	select {
	case res := <-ch:
		if res.err == nil && len(res.b) > maxConfigSize {
			res.err = fmt.Errorf("config larger than %d bytes", maxConfigSize)
		}
		return res.b, res.err
	case <-timer.C:
		return nil, fmt.Errorf("no end of input after %v", stdinTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// readFD reads a file descriptor to its end, waiting with poll(2) so that
// the wait is bounded without a helper goroutine or the runtime's poller:
// a plugin process starts and ends within a few milliseconds, and thread
// start-up is a visible part of that.
func readFD(ctx context.Context, fd int) ([]byte, error) {
	bound := stdinTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < bound {
		bound = time.Until(d)
	}
	deadline := time.Now().Add(bound)
	// The buffer grows on the heap: a large one on the stack would make
	// the runtime grow and copy the goroutine's stack at once.
	out := make([]byte, 0, 1024)
	// Once the writer has hung up, what is left is in the pipe and reads
	// no longer block: no more polls.
	hup := false
	for {
		if !hup {
			ready, err := poll(fd, deadline, bound)
			if err != nil {
				return nil, err
			}
			hup = ready&unix.POLLHUP != 0
			if ready == 0 {
				continue
			}
		}
		var done, again bool
		var err error
		if out, done, again, err = readSome(fd, out); err != nil || done {
			return out, err
		}
		hup = hup && !again
	}
}

// poll waits until fd is readable or the deadline passes, and returns the
// events; none after an interrupted or timed-out wait.
func poll(fd int, deadline time.Time, bound time.Duration) (int16, error) {
	wait := time.Until(deadline)
	if wait <= 0 {
		return 0, fmt.Errorf("no end of input after %v", bound.Round(time.Millisecond))
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, int(wait.Milliseconds())+1)
	switch {
	case errors.Is(err, unix.EINTR), n == 0:
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("poll: %w", err)
	}
	return fds[0].Revents, nil
}

// readSome reads once from fd into out's spare room, growing it first
// when it is full. done is set at the end of input, again when the read
// would have had to wait.
func readSome(fd int, out []byte) (_ []byte, done, again bool, err error) {
	if len(out) == cap(out) {
		out = slices.Grow(out, len(out))
	}
	m, err := unix.Read(fd, out[len(out):cap(out)])
	switch {
	case errors.Is(err, unix.EINTR):
		return out, false, false, nil
	case errors.Is(err, unix.EAGAIN):
		return out, false, true, nil
	case err != nil:
		return nil, false, false, fmt.Errorf("read: %w", err)
	case m == 0:
		return out, true, false, nil
	}
	out = out[:len(out)+m]
	if len(out) > maxConfigSize {
		return nil, false, false, fmt.Errorf("config larger than %d bytes", maxConfigSize)
	}
	return out, false, false, nil
}
