package main

import (
	"os"
	"path/filepath"
)

// install copies the binary src to dst with plain reads and writes, as
// `make install`, install(1) and a package manager do, and every measured
// binary goes through it. A binary fresh from the Go linker was written
// through a shared mapping, so the page cache holds it in single pages,
// and it runs measurably slower than the same bytes written by write(2)
// (docs/performance.md#installed-binaries). Plugins on a node are
// installed binaries.
func install(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// installAll installs the named binaries of dir into a new directory under
// work and returns it.
func installAll(dir, work string, names ...string) (string, error) {
	out := filepath.Join(work, "bin")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	for _, n := range names {
		if err := install(filepath.Join(dir, n), filepath.Join(out, n)); err != nil {
			return "", err
		}
	}
	return out, nil
}
