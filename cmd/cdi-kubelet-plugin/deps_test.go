package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The daemon runs one plugin per call through pkg/caller: it links
// neither bbolt nor the plugins' store, which only the plugins and
// cdictl's cross-plugin ADD (cmd/cdictl/addall.go) read.
func TestKubeletPluginLinksNoStore(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go test runs, but no go command is on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "bbolt") || strings.HasSuffix(dep, "/internal/store") || strings.Contains(dep, "/internal/store/") {
			t.Errorf("cdi-kubelet-plugin links %s", dep)
		}
	}
	if !strings.Contains(string(out), "github.com/cdi-exec/plugins/pkg/caller") {
		t.Fatalf("go list -deps lists no pkg/caller; its output:\n%s", out)
	}
}
