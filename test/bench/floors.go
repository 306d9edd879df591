package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// floors are the two reference binaries every scenario is measured against.
type floors struct {
	exec    string // does nothing
	startup string // links the plugins' dependencies, reads stdin, answers
	durable string // one durable bbolt Update
}

// buildFloors builds the floors from test/bench/floor the way the plugins
// are built (static, trimmed, stripped).
func buildFloors(work string) (floors, error) {
	f := floors{exec: filepath.Join(work, "floor-exec"), startup: filepath.Join(work, "floor-startup"),
		durable: filepath.Join(work, "floor-bbolt")}
	for bin, pkg := range map[string]string{f.exec: "./test/bench/floor/exec", f.startup: "./test/bench/floor/startup",
		f.durable: "./test/bench/floor/bbolt"} {
		if err := goBuild(bin, pkg); err != nil {
			return f, err
		}
	}
	return f, nil
}

// goBuild builds pkg (a package path or module@version) with the plugins'
// build flags and installs it as bin.
func goBuild(bin, pkg string) error {
	linked := bin + ".linked"
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", linked, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", pkg, err, out)
	}
	defer os.Remove(linked)
	return install(linked, bin)
}
