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
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil, fmt.Errorf("no end of input after %v", bound.Round(time.Millisecond))
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(wait.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("poll: %w", err)
		}
		if n == 0 {
			continue
		}
		if len(out) == cap(out) {
			out = slices.Grow(out, len(out))
		}
		m, err := unix.Read(fd, out[len(out):cap(out)])
		switch {
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue
		case err != nil:
			return nil, fmt.Errorf("read: %w", err)
		case m == 0:
			return out, nil
		}
		out = out[:len(out)+m]
		if len(out) > maxConfigSize {
			return nil, fmt.Errorf("config larger than %d bytes", maxConfigSize)
		}
	}
}
