//go:build e2enode

package k8se2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The bounds the modes' spec-file healing is held to on a real node
// (docs/kubernetes.md#spec-files-put-back): a spec file removed while the
// driver runs is back within specFileBound (inotify, a 200 ms debounce,
// a pinned replay ADD), and a container killed after its spec files were
// lost and put back runs again, with its devices, within restartBound.
const (
	specFileBound = 2 * time.Second
	restartBound  = 30 * time.Second
)

// emptyDir removes every file in dir, leaving the directory (which the
// driver and the runtime have mounted or open) in place, as an operator
// or a tmpfs cleaner empties /var/run/cdi. It returns the names removed.
func emptyDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return names, err
		}
		names = append(names, e.Name())
	}
	return names, nil
}

// waitFiles waits until every file of names is in dir again, within
// bound, and returns how long that took from since.
func waitFiles(ctx context.Context, t *testing.T, dir string, names []string, since time.Time, bound time.Duration, deps ...*daemon) time.Duration {
	t.Helper()
	ctx, cancel := context.WithDeadline(ctx, since.Add(bound))
	defer cancel()
	err := waitFor(ctx, "the spec files put back", func(context.Context) error {
		for _, name := range names {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
		return nil
	}, deps...)
	if err != nil {
		t.Fatalf("%v (bound %v)", err, bound)
	}
	return time.Since(since)
}

// deleteSpecFiles removes the files names from dir while the driver runs,
// as a person would by hand, and checks that they are back within
// specFileBound.
func deleteSpecFiles(ctx context.Context, t *testing.T, dir string, names []string, deps ...*daemon) {
	t.Helper()
	start := time.Now()
	for _, name := range names {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	took := waitFiles(ctx, t, dir, names, start, specFileBound, deps...)
	t.Logf("%v removed by hand: back %.2fs later (bound %v)", names, took.Seconds(), specFileBound)
}
