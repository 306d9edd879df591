package skel

import (
	"os/exec"
	"strings"
	"testing"
)

// Every plugin of this repository is built with updatemaxprocs=0: a
// process that lives for milliseconds has no use for the runtime's watch
// of its cgroup's CPU limit, whose start costs it about 20 µs
// (docs/performance.md#the-go-runtimes-start). The long-lived
// cdi-kubelet-plugin keeps the default.
func TestPluginsSkipMaxProcsUpdates(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go test runs, but no go command is on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-f", "{{.ImportPath}} {{.Name}} {{.DefaultGODEBUG}}", "../../plugins/...", "../../cmd/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	plugins := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != "main" {
			continue
		}
		set := len(f) == 3 && strings.Contains(","+f[2]+",", ",updatemaxprocs=0,")
		plugin := strings.HasPrefix(f[0], "github.com/cdi-exec/plugins/plugins/")
		switch {
		case plugin && !set:
			t.Errorf("%s is built without updatemaxprocs=0 (DefaultGODEBUG %q)", f[0], strings.Join(f[2:], " "))
		case !plugin && set:
			t.Errorf("%s, not a plugin, is built with updatemaxprocs=0", f[0])
		}
		if plugin {
			plugins++
		}
	}
	if plugins < 4 {
		t.Fatalf("go list found %d plugin mains; its output:\n%s", plugins, out)
	}
}
