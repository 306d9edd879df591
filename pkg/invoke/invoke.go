// Package invoke runs another CDI plugin the way a caller does: find the
// binary along CDI_PATH, run it with CDI_* variables and the config on stdin
// under a deadline, and decode what it prints into a result or an error that
// says what went wrong (the plugin's protocol error, a timeout, a crash, or
// output that is not JSON).
package invoke

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cdi-exec/plugins/internal/nearmiss"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// DefaultTimeout bounds a plugin run when the caller sets none.
const DefaultTimeout = 30 * time.Second

// ErrNotFound means no executable of that name is on the search path.
var ErrNotFound = errors.New("plugin not found")

// Find returns the first regular, executable file called name in the
// colon-separated dirs. Names with a path separator are refused, so a config
// can never point outside the plugin directories.
func Find(name, dirs string) (string, error) {
	if err := protocol.ValidPluginName(name); err != nil {
		return "", fmt.Errorf("invalid plugin name: %w", err)
	}
	for _, dir := range filepath.SplitList(dirs) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	err := fmt.Errorf("%w: %q in %s (the search path, %s)", ErrNotFound, name, dirs, protocol.EnvPath)
	if near, ok := nearmiss.Closest(name, executables(dirs)); ok {
		err = fmt.Errorf("%w; did you mean %q?", err, near)
	}
	return "", err
}

// executables lists the names of the regular, executable files in the
// colon-separated dirs, for a hint when a name is not among them.
func executables(dirs string) []string {
	var names []string
	for _, dir := range filepath.SplitList(dirs) {
		ents, err := os.ReadDir(dir)
		if dir == "" || err != nil {
			continue
		}
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
				names = append(names, e.Name())
			}
		}
	}
	return names
}

// Call is one plugin run.
type Call struct {
	Plugin  string   // binary name, looked up in Path
	Path    string   // CDI_PATH
	Env     []string // NAME=value pairs that override the inherited environment
	Config  []byte   // written to stdin
	Timeout time.Duration
}

// Reply is what a plugin printed on success: nothing, or one JSON object.
type Reply struct {
	Object map[string]json.RawMessage // nil when nothing was printed
	Raw    []byte
	Stderr string
}

// Error is a protocol error a plugin answered with: its code, msg and
// details, with what the run left besides.
type Error struct {
	answer
	Stderr string `json:"-"`
	Status int    `json:"-"` // the plugin's exit status
}

// answer names protocol.Error for embedding, whose own name would hide
// its Error method.
type answer = protocol.Error

// Failure kinds of a run that produced no protocol answer.
const (
	KindTimeout = "timeout"
	KindCrash   = "crash"   // non-zero exit without a JSON error
	KindGarbage = "garbage" // stdout is not one JSON object
	KindExec    = "exec"    // could not start
)

// RunError is a run that did not produce a protocol answer.
type RunError struct {
	Kind   string
	Plugin string
	Stderr string
	Err    error
}

func (e *RunError) Error() string { return e.Plugin + ": " + e.Detail() }

// Detail is the error without the plugin's name, for messages that name
// the plugin already.
func (e *RunError) Detail() string {
	s := fmt.Sprintf("%s: %v", e.Kind, e.Err)
	if e.Stderr != "" {
		s += "; stderr: " + strings.TrimSpace(e.Stderr)
	}
	return s
}

func (e *RunError) Unwrap() error { return e.Err }

// Run executes the plugin and decodes its answer. A protocol error is
// returned as *Error even when the exit status is 0 (as DEL does).
func Run(ctx context.Context, c Call) (*Reply, error) {
	bin, err := Find(c.Plugin, c.Path)
	if err != nil {
		return nil, &RunError{Kind: KindExec, Plugin: c.Plugin, Err: err}
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var stdout, stderr bytes.Buffer
	var runErr error
	for attempt := 0; ; attempt++ {
		stdout.Reset()
		stderr.Reset()
		cmd := command(ctx, bin, c, &stdout, &stderr)
		runErr = cmd.Run()
		// A binary that is being replaced (make install during a run) is
		// briefly busy; try again a few times.
		if errors.Is(runErr, syscall.ETXTBSY) && attempt < 5 && ctx.Err() == nil {
			time.Sleep(time.Duration(attempt+1) * 20 * time.Millisecond)
			continue
		}
		break
	}
	status := 0
	var exitErr *exec.ExitError
	switch {
	case errors.Is(runErr, exec.ErrWaitDelay):
		// The plugin exited with status 0 and its answer is read; only
		// something it left running still holds its stdout open.
	case ctx.Err() != nil:
		return nil, &RunError{Kind: KindTimeout, Plugin: c.Plugin, Stderr: stderr.String(),
			Err: fmt.Errorf("no answer within %v", timeout)}
	case errors.As(runErr, &exitErr):
		status = exitErr.ExitCode()
	case runErr != nil:
		return nil, &RunError{Kind: KindExec, Plugin: c.Plugin, Stderr: stderr.String(), Err: runErr}
	}
	return decode(c.Plugin, stdout.Bytes(), stderr.String(), status)
}

// command builds the process: its own process group, so that a timeout
// kills the plugin and anything it started; and a wait delay, so that a
// grandchild holding stdout open cannot keep the caller waiting.
func command(ctx context.Context, bin string, c Call, stdout, stderr *bytes.Buffer) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = mergeEnv(os.Environ(), c.env())
	cmd.Stdin = bytes.NewReader(c.Config)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// env is what the plugin's environment overrides: the call's Env, with
// CDI_PATH set to the path the plugin was found on unless Env sets it, so
// that a plugin chain-loading delegates looks where its caller looked
// (as CNI hands its plugins CNI_PATH).
func (c Call) env() []string {
	if c.Path == "" {
		return c.Env
	}
	for _, kv := range c.Env {
		if strings.HasPrefix(kv, protocol.EnvPath+"=") {
			return c.Env
		}
	}
	return append([]string{protocol.EnvPath + "=" + c.Path}, c.Env...)
}

// mergeEnv returns base with every variable named in over replaced.
func mergeEnv(base, over []string) []string {
	names := map[string]bool{}
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		names[k] = true
	}
	out := make([]string, 0, len(base)+len(over))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !names[k] {
			out = append(out, kv)
		}
	}
	return append(out, over...)
}

// decode turns a plugin's output into a reply or an error.
func decode(plugin string, out []byte, stderr string, status int) (*Reply, error) {
	if len(bytes.TrimSpace(out)) == 0 {
		if status != 0 {
			return nil, &RunError{Kind: KindCrash, Plugin: plugin, Stderr: stderr,
				Err: fmt.Errorf("exit status %d and nothing on stdout", status)}
		}
		return &Reply{Stderr: stderr}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil || obj == nil || dec.More() {
		if err == nil {
			err = errors.New("not exactly one JSON object")
		}
		return nil, &RunError{Kind: KindGarbage, Plugin: plugin, Stderr: stderr,
			Err: fmt.Errorf("stdout is not a JSON object (exit status %d): %v: %q", status, err, clip(out))}
	}
	if e := protocolError(obj); e != nil {
		e.Stderr, e.Status = stderr, status
		return nil, e
	}
	if status != 0 {
		return nil, &RunError{Kind: KindCrash, Plugin: plugin, Stderr: stderr,
			Err: fmt.Errorf("exit status %d with a non-error answer: %q", status, clip(out))}
	}
	return &Reply{Object: obj, Raw: out, Stderr: stderr}, nil
}

// protocolError recognises an error object in either spelling: code/msg
// (the spec's examples, CNI) or error/message (the spec's prose).
func protocolError(obj map[string]json.RawMessage) *Error {
	codeRaw, ok := obj["code"]
	if !ok {
		codeRaw, ok = obj["error"]
	}
	if !ok {
		return nil
	}
	var e Error
	if json.Unmarshal(codeRaw, &e.Code) != nil {
		return nil
	}
	msg := obj["msg"]
	if msg == nil {
		msg = obj["message"]
	}
	_ = json.Unmarshal(msg, &e.Msg)
	if d, ok := obj["details"]; ok {
		_ = json.Unmarshal(d, &e.Details)
	}
	return &e
}

func clip(b []byte) string {
	const max = 200
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
