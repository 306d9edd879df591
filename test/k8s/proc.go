//go:build e2enode

package k8se2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// daemon is a long-running process a test started: containerd, the
// kubelet, a control-plane component or cdi-kubelet-plugin. Its output goes to
// logs/<name>.log under the test's directory, appended across restarts.
type daemon struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done
}

// spawn starts bin in the private cgroup. A shell writes its own pid to
// the cgroup and then execs bin, so the process and all it forks are in
// the cgroup from their first instruction.
func spawn(cg *cgroups, logDir, name, bin string, args, env []string) (*daemon, error) {
	path := filepath.Join(logDir, name+".log")
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	fmt.Fprintf(out, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	sh := append([]string{"-c", `echo $$ >"$0" && exec "$@"`, cg.procs(), bin}, args...)
	cmd := exec.Command("/bin/sh", sh...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	// If the test binary dies (a -timeout panic runs no cleanup), take
	// the daemon with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	d := &daemon{name: name, log: path, cmd: cmd, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	return d, nil
}

// exited reports whether the process has ended, and how.
func (d *daemon) exited() (bool, error) {
	select {
	case <-d.done:
		return true, d.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM, then SIGKILL if the process is still there after
// grace, and waits for it.
func (d *daemon) stop(grace time.Duration) {
	if done, _ := d.exited(); done {
		return
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(grace):
		d.cmd.Process.Kill()
		<-d.done
	}
}

// kill ends the process with SIGKILL, as a force-deleted pod's container
// ends, and waits for it.
func (d *daemon) kill() {
	if done, _ := d.exited(); !done {
		d.cmd.Process.Kill()
		<-d.done
	}
}

// tail returns the last n lines of the daemon's log.
func (d *daemon) tail(n int) string {
	data, err := os.ReadFile(d.log)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// errExited reports a daemon that ended while the test waited for it.
var errExited = errors.New("exited")

// errGiveUp marks a condition that can no longer come true.
var errGiveUp = errors.New("giving up")

// waitFor polls cond until it holds, the daemons it depends on exit or
// ctx ends. what names the condition in the error.
func waitFor(ctx context.Context, what string, cond func(context.Context) error, deps ...*daemon) error {
	var last error
	for {
		if last = cond(ctx); last == nil {
			return nil
		}
		if errors.Is(last, errGiveUp) {
			return fmt.Errorf("waiting for %s: %w", what, last)
		}
		for _, d := range deps {
			if done, err := d.exited(); done {
				return fmt.Errorf("waiting for %s: %s %w (%v); its log ends:\n%s", what, d.name, errExited, err, d.tail(30))
			}
		}
		if sleep(ctx, 200*time.Millisecond) != nil {
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		}
	}
}

// run runs a short command with a deadline and returns its combined
// output.
func run(ctx context.Context, env []string, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
