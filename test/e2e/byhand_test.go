package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/test/fixture"
)

// TestPluginsByHand: a plugin run by a person, with stdin on a terminal or
// with arguments, prints one line saying what it is and how it is called,
// at once instead of waiting for a config on stdin: --help on stdout with
// exit 0, anything else on stderr with exit 1 (DEL, as always, 0).
func TestPluginsByHand(t *testing.T) {
	tty, ptmx, err := fixture.OpenPTY()
	if err != nil {
		t.Skipf("this machine cannot open a pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	tests := []struct {
		name   string
		args   []string
		env    []string
		status int
		stdout bool   // the line goes to stdout
		ends   string // the line's end
	}{
		{"no command", nil, nil, 1, false, "stdin\n"},
		{"--help", []string{"--help"}, nil, 0, true, "stdin\n"},
		{"INFO", nil, []string{"CDI_COMMAND=INFO"}, 1, false, "stdin\n"},
		{"DEL", nil, []string{"CDI_COMMAND=DEL", "CDI_REQUEST_ID=x"}, 0, false, "stdin\n"},
		{"misspelt", nil, []string{"CDI_COMAND=INFO"}, 1, false, "; CDI_COMAND is set: did you mean CDI_COMMAND?\n"},
	}
	for _, plugin := range []string{"drm", "generic-tty", "sriov"} {
		for _, tt := range tests {
			t.Run(plugin+" "+tt.name, func(t *testing.T) {
				// The deadline only ends a run that waits for stdin; the
				// assertions are on what the plugin printed.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, filepath.Join(binDir, plugin), tt.args...)
				cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, tt.env...)
				cmd.Stdin = tty
				var out, errOut bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errOut
				err := cmd.Run()
				status := 0
				if ee, ok := err.(*exec.ExitError); ok {
					status = ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				if status != tt.status || ctx.Err() != nil {
					t.Fatalf("run: %v (deadline: %v); want exit status %d", err, ctx.Err(), tt.status)
				}
				line, other := errOut.String(), out.String()
				if tt.stdout {
					line, other = other, line
				}
				if other != "" || strings.Count(line, "\n") != 1 || !strings.HasPrefix(line, plugin+": CDI exec plugin that ") ||
					!strings.Contains(line, "CDI_COMMAND=") || !strings.HasSuffix(line, tt.ends) {
					t.Errorf("stdout %q, stderr %q; want one line ending %q on stdout=%v, nothing on the other", out.String(), errOut.String(), tt.ends, tt.stdout)
				}
			})
		}
	}
}

// A misspelt variable is named in the error of the one it was meant for,
// and a misspelt top-level config member is warned about on stderr.
func TestPluginsNearMisses(t *testing.T) {
	n := newNode(t, specTTYHost)
	conf := `{"cdiVersion":"0.0.2","name":"t","type":"tty","plugin":"generic-tty","arg":{"num_system_reserved":40}}`
	r := n.run("generic-tty", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUESTID=a")
	if r.status != 1 || r.code(t) != 102 || !strings.Contains(r.stdout, "CDI_REQUEST_ID is not set; CDI_REQUESTID is set: did you mean CDI_REQUEST_ID?") {
		t.Errorf("CDI_REQUESTID: %d %s", r.status, r.stdout)
	}
	r = n.run("generic-tty", conf, "CDI_COMMAND=INFO")
	if r.status != 0 || !strings.Contains(r.stderr, `generic-tty: warning: config: unknown member "arg" is ignored; did you mean "args"?`) {
		t.Errorf("arg for args: %d %s %s", r.status, r.stdout, r.stderr)
	}
}
