package e2e

import (
	"bufio"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestStackFirst checks, in each built plugin, that package stack
// initialises before the first package that calls deep enough to grow the
// main goroutine's stack (internal/godebug) and before any other package of
// this module: otherwise the stack would be grown step by step after all.
func TestStackFirst(t *testing.T) {
	const stack = "github.com/cdi-exec/plugins/internal/stack"
	for _, plugin := range []string{"drm", "generic-tty", "sriov"} {
		t.Run(plugin, func(t *testing.T) {
			r := runBin(t, filepath.Join(binDir, plugin), "", []string{"GODEBUG=inittrace=1", "CDI_COMMAND=VERSION"})
			if r.status != 0 {
				t.Fatalf("VERSION: exit %d\n%s", r.status, r.stderr)
			}
			order := initOrder(r.stderr)
			at := slices.Index(order, stack)
			if at < 0 {
				t.Fatalf("%s is not initialised in %s:\n%s", stack, plugin, r.stderr)
			}
			for _, pkg := range order[:at] {
				if pkg == "internal/godebug" || strings.HasPrefix(pkg, "github.com/cdi-exec/") {
					t.Errorf("%s initialises before %s; the order is %q", pkg, stack, order)
				}
			}
		})
	}
}

// initOrder lists the packages of GODEBUG=inittrace=1 lines in their
// order ("init PKG @0.1 ms, ...").
func initOrder(stderr string) []string {
	var order []string
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 2 && f[0] == "init" && strings.HasPrefix(f[2], "@") {
			order = append(order, f[1])
		}
	}
	return order
}
