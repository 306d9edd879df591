package main

import (
	"context"
	"strings"
	"testing"
)

// --version prints the build on stdout and starts nothing.
func TestVersionFlag(t *testing.T) {
	var out, errOut strings.Builder
	st := run(context.Background(), []string{"--version"}, env{getenv: func(string) string { return "" }, stdout: &out, stderr: &errOut})
	if st != exitOK || errOut.Len() != 0 || !strings.HasPrefix(out.String(), "cdi-kubelet-plugin ") ||
		!strings.Contains(out.String(), "\nprotocol: 0.0.1, 0.0.2\n") {
		t.Fatalf("status %d, stdout %q, stderr %q", st, out.String(), errOut.String())
	}
}
