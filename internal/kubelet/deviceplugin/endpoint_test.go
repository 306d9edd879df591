package deviceplugin

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/test/kubelettest"
)

// Run refuses a socket path the kernel cannot bind, saying so, instead
// of failing to listen with "invalid argument".
func TestRunRefusesLongSocketPath(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, strings.Repeat("d", 120-len(dir)))
	if err := os.Mkdir(long, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &Endpoint{Resource: "cdi-exec.io/tty", Dir: long, Socket: "cdi-exec.io-tty.sock", Log: slog.New(slog.DiscardHandler)}
	err := p.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "more than a unix socket can have (107)") {
		t.Fatalf("Run = %v, want a refusal of the socket path", err)
	}
}

// fakeClock is a clock the test moves, counting how often it is read.
type fakeClock struct {
	base  time.Time
	ahead atomic.Int64 // nanoseconds past base
	reads atomic.Int64
}

func (c *fakeClock) now() time.Time {
	c.reads.Add(1)
	return c.base.Add(time.Duration(c.ahead.Load()))
}

// readsPast waits until the clock has been read n more times than now:
// so many checks of Run's loop.
func (c *fakeClock) readsPast(t *testing.T, n int64) {
	t.Helper()
	want := c.reads.Load() + n
	for c.reads.Load() < want {
		select {
		case <-t.Context().Done():
			t.Fatal("Run stopped checking")
		case <-time.After(time.Millisecond):
		}
	}
}

// waitFor waits until the log holds n lines containing s.
func waitFor(t *testing.T, log *kubelettest.Buffer, s string, n int) {
	t.Helper()
	for strings.Count(log.String(), s) < n {
		select {
		case <-t.Context().Done():
			t.Fatalf("the log never had %d of %q:\n%s", n, s, log.String())
		case <-time.After(time.Millisecond):
		}
	}
}

// Without the kubelet, Run waits: one log line that names the missing
// directory or socket and what is expected, the same line again only
// every WaitLog (by the clock, not by retries), and it registers once
// the kubelet is there.
func TestRunWaitsForTheKubelet(t *testing.T) {
	k := kubelettest.Start(t)
	k.Stop()
	if err := os.RemoveAll(k.PluginDir()); err != nil {
		t.Fatal(err)
	}
	var log kubelettest.Buffer
	clock := &fakeClock{base: time.Now()}
	p := &Endpoint{Resource: "cdi-exec.io/tty", Dir: k.PluginDir(), Socket: "cdi-exec.io-tty.sock",
		Log: slog.New(slog.NewTextHandler(&log, nil)), Watch: time.Millisecond, WaitLog: 30 * time.Second, Now: clock.now}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	noDir := `msg="the kubelet's device-plugins directory is not there: waiting for the kubelet to make it" resource=cdi-exec.io/tty dir=` + k.PluginDir() + ` expected=`
	waitFor(t, &log, noDir, 1)
	clock.readsPast(t, 50)
	if n := strings.Count(log.String(), noDir); n != 1 {
		t.Fatalf("%d lines of a missing directory within 30 s, want 1:\n%s", n, log.String())
	}
	clock.ahead.Add(int64(30 * time.Second))
	waitFor(t, &log, noDir, 2)

	if err := os.Mkdir(k.PluginDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	noSock := `msg="the kubelet's registration socket is not there: waiting for the kubelet to start" resource=cdi-exec.io/tty socket=` + filepath.Join(k.PluginDir(), "kubelet.sock")
	waitFor(t, &log, noSock, 1)
	clock.readsPast(t, 50)
	if n := strings.Count(log.String(), noSock); n != 1 {
		t.Fatalf("%d lines of a missing kubelet.sock within 30 s, want 1:\n%s", n, log.String())
	}
	if err := p.Ready(t.Context()); err == nil {
		t.Error("ready without a kubelet")
	}

	k.Restart()
	select {
	case r := <-k.Registrations:
		if r.ResourceName != p.Resource {
			t.Errorf("registered %s", r.ResourceName)
		}
	case <-t.Context().Done():
		t.Fatalf("never registered:\n%s", log.String())
	}
	waitFor(t, &log, "registered with the kubelet", 1)
}
