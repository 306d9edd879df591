package skel

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/test/fixture"
)

// openPTY opens a pseudo-terminal pair and returns its terminal side.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	tty, ptmx, err := fixture.OpenPTY()
	if err != nil {
		t.Skipf("this machine cannot open a pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { tty.Close(); ptmx.Close() })
	return tty
}

// TestByHand: run by a person (no CDI_COMMAND, and stdin on a terminal or
// arguments on the command line), a plugin says in one line on stderr what
// it is and how it is called, and exits 1 without waiting for stdin.
func TestByHand(t *testing.T) {
	tty := openPTY(t)
	never, _, err := os.Pipe() // a stdin nobody writes to or closes
	if err != nil {
		t.Fatal(err)
	}
	defer never.Close()
	tests := []struct {
		name  string
		stdin *os.File
		args  []string
	}{
		{"no arguments, stdin on a terminal", tty, nil},
		{"--help, stdin on a terminal", tty, []string{"--help"}},
		{"--help, stdin an open pipe", never, []string{"--help"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Without the check, the plugin would wait for stdin until
			// this deadline and then answer code 101.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			d := Dispatcher{Getenv: func(string) string { return "" }, Args: tt.args, Stdin: tt.stdin, Stdout: &out, Stderr: &errOut}
			status := d.Run(ctx, About{Name: "drm", Summary: "hands out GPUs", New: func(*Call) (Plugin, error) {
				t.Error("the plugin was started")
				return fake{}, nil
			}})
			line := errOut.String()
			if status != 1 || out.Len() != 0 || strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
				t.Fatalf("status %d, stdout %q, stderr %q; want 1, nothing, one line", status, out.String(), line)
			}
			for _, want := range []string{"drm: ", "hands out GPUs", "CDI_COMMAND", "stdin"} {
				if !strings.Contains(line, want) {
					t.Errorf("the line %q does not say %q", line, want)
				}
			}
		})
	}
}

// TestNotByHand: a caller's runs are unchanged by the check: a command on
// a terminal still reads stdin, and no command with the config on a pipe
// is code 3.
func TestNotByHand(t *testing.T) {
	tty := openPTY(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var out, errOut bytes.Buffer
	d := Dispatcher{Getenv: func(k string) string { return map[string]string{"CDI_COMMAND": "INFO"}[k] }, Stdin: tty, Stdout: &out, Stderr: &errOut}
	if status := d.Run(ctx, About{Name: "drm", New: func(*Call) (Plugin, error) { return fake{}, nil }}); status != 1 || !strings.Contains(out.String(), "reading stdin") {
		t.Errorf("INFO with stdin on a terminal: status %d, %s", status, out.String())
	}
	status, obj, _ := run(t, map[string]string{}, strings.NewReader(gpuConf), fake{})
	if status != 1 || obj["code"] != float64(3) {
		t.Errorf("no command with a config on stdin: %d %v", status, obj)
	}
}
