package skel

import (
	"context"
	"strings"
	"testing"
)

// failReader fails the test when anything reads it.
type failReader struct{ t *testing.T }

func (r failReader) Read([]byte) (int, error) {
	r.t.Error("stdin was read")
	return 0, nil
}

// --version answers on stdout and exits 0 before anything else: it reads
// no stdin and ignores CDI_COMMAND; other arguments are not --version.
func TestVersionFlag(t *testing.T) {
	var stdout, stderr strings.Builder
	d := Dispatcher{
		Getenv: func(k string) string { return map[string]string{"CDI_COMMAND": "ADD"}[k] },
		Args:   []string{"--version"},
		Stdin:  failReader{t}, Stdout: &stdout, Stderr: &stderr,
	}
	about := About{Name: "drm", New: func(*Call) (Plugin, error) { t.Fatal("plugin created"); return nil, nil }}
	if got := d.Run(context.Background(), about); got != 0 || stderr.Len() != 0 ||
		!strings.HasPrefix(stdout.String(), "drm ") || !strings.Contains(stdout.String(), "\nprotocol: 0.0.1, 0.0.2\n") {
		t.Fatalf("exit %d, stdout %q, stderr %q", got, stdout.String(), stderr.String())
	}
	stderr.Reset()
	d.Args = []string{"--version", "x"}
	d.Getenv = func(string) string { return "" }
	if got := d.Run(context.Background(), about); got != 1 || strings.Contains(stderr.String(), "protocol:") {
		t.Fatalf("--version x: exit %d, stderr %q", got, stderr.String())
	}
}
