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

// TestPluginsByHand: a plugin run by a person, with no CDI_COMMAND and
// stdin on a terminal, or with arguments such as --help, prints one line on
// stderr saying what it is and how it is called, and exits 1 at once
// instead of waiting for a config on stdin.
func TestPluginsByHand(t *testing.T) {
	tty, ptmx, err := fixture.OpenPTY()
	if err != nil {
		t.Skipf("this machine cannot open a pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	for _, plugin := range []string{"drm", "generic-tty", "sriov"} {
		for _, args := range [][]string{nil, {"--help"}} {
			t.Run(plugin+strings.Join(append([]string{""}, args...), " "), func(t *testing.T) {
				// The deadline only ends a run that waits for stdin; the
				// assertions are on what the plugin printed.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, filepath.Join(binDir, plugin), args...)
				cmd.Env = []string{"PATH=/usr/bin:/bin"}
				cmd.Stdin = tty
				var out, errOut bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errOut
				err := cmd.Run()
				ee, ok := err.(*exec.ExitError)
				if !ok || ee.ExitCode() != 1 || ctx.Err() != nil {
					t.Fatalf("run: %v (deadline: %v); want exit status 1", err, ctx.Err())
				}
				line := errOut.String()
				if out.Len() != 0 || strings.Count(line, "\n") != 1 || !strings.HasPrefix(line, plugin+": CDI exec plugin that ") ||
					!strings.Contains(line, "CDI_COMMAND=") || !strings.Contains(line, "stdin") {
					t.Errorf("stdout %q, stderr %q; want nothing, and one line on stderr", out.String(), line)
				}
			})
		}
	}
}
