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

// TestByHand: run by a person (arguments on the command line, or stdin on
// a terminal), a plugin says in one line what it is and how it is called,
// without waiting for stdin: --help on stdout with exit 0, anything else
// on stderr with exit 1 (DEL 0). VERSION reads no stdin and still answers.
func TestByHand(t *testing.T) {
	tty := openPTY(t)
	never, _, err := os.Pipe() // a stdin nobody writes to or closes
	if err != nil {
		t.Fatal(err)
	}
	defer never.Close()
	tests := []struct {
		name   string
		stdin  *os.File
		args   []string
		env    map[string]string
		status int
		stdout bool   // the line goes to stdout, not stderr
		hint   string // the line ends with this
	}{
		{"no arguments, stdin on a terminal", tty, nil, nil, 1, false, "stdin\n"},
		{"--help, stdin on a terminal", tty, []string{"--help"}, nil, 0, true, "stdin\n"},
		{"--help, stdin an open pipe", never, []string{"--help"}, nil, 0, true, "stdin\n"},
		{"-h with a command", never, []string{"-h"}, map[string]string{"CDI_COMMAND": "INFO"}, 0, true, "stdin\n"},
		{"other argument, stdin an open pipe", never, []string{"--what"}, nil, 1, false, "stdin\n"},
		{"INFO, stdin on a terminal", tty, nil, map[string]string{"CDI_COMMAND": "INFO"}, 1, false, "stdin\n"},
		{"ADD, stdin on a terminal", tty, nil, map[string]string{"CDI_COMMAND": "add"}, 1, false, "stdin\n"},
		{"DEL, stdin on a terminal", tty, nil, map[string]string{"CDI_COMMAND": "DEL"}, 0, false, "stdin\n"},
		{"misspelt CDI_COMMAND", tty, nil, map[string]string{"CDI_COMAND": "INFO"}, 1, false, "; CDI_COMAND is set: did you mean CDI_COMMAND?\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Without the check, the plugin would wait for stdin until
			// this deadline and then answer code 101.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			d := Dispatcher{Getenv: func(k string) string { return tt.env[k] }, Args: tt.args, Stdin: tt.stdin, Stdout: &out, Stderr: &errOut,
				Environ: func() []string {
					var kv []string
					for k, v := range tt.env {
						kv = append(kv, k+"="+v)
					}
					return kv
				}}
			status := d.Run(ctx, About{Name: "drm", Summary: "hands out GPUs", New: func(*Call) (Plugin, error) {
				t.Error("the plugin was started")
				return fake{}, nil
			}})
			line, other := errOut.String(), out.String()
			if tt.stdout {
				line, other = other, line
			}
			if status != tt.status || other != "" || strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, tt.hint) {
				t.Fatalf("status %d, stdout %q, stderr %q; want %d and one line ending %q on %s", status, out.String(), errOut.String(),
					tt.status, tt.hint, map[bool]string{true: "stdout", false: "stderr"}[tt.stdout])
			}
			for _, want := range []string{"drm: ", "hands out GPUs", "CDI_COMMAND", "stdin"} {
				if !strings.Contains(line, want) {
					t.Errorf("the line %q does not say %q", line, want)
				}
			}
		})
	}
}

// TestNotByHand: a caller's runs are unchanged by the check: VERSION with
// stdin on a terminal answers, and no command with the config on a pipe
// is code 3, naming a misspelt variable.
func TestNotByHand(t *testing.T) {
	tty := openPTY(t)
	var out, errOut bytes.Buffer
	d := Dispatcher{Getenv: func(k string) string { return map[string]string{"CDI_COMMAND": "VERSION"}[k] }, Stdin: tty, Stdout: &out, Stderr: &errOut}
	if status := d.Run(context.Background(), About{Name: "drm", New: func(*Call) (Plugin, error) { return fake{}, nil }}); status != 0 || !strings.Contains(out.String(), "supportedVersions") {
		t.Errorf("VERSION with stdin on a terminal: status %d, %s", status, out.String())
	}
	status, obj, _ := run(t, map[string]string{}, strings.NewReader(gpuConf), fake{})
	if status != 1 || obj["code"] != float64(3) || obj["details"] != "CDI_COMMAND is not set" {
		t.Errorf("no command with a config on stdin: %d %v", status, obj)
	}
}
