//go:build e2enode

package k8se2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroups is a private cgroup, /<name> in every hierarchy. The processes
// a test starts run in <name>/daemons and the kubelet puts its pods under
// <name>/pods (its cgroupRoot), so everything the test started, down to
// the containers and the shims, can be found and killed, and the whole
// tree removed, without touching any other cgroup.
type cgroups struct {
	name  string
	roots []string // mount points of all hierarchies
	track string   // the hierarchy whose membership tells our processes
}

// newCgroups creates the private cgroup. errCannot wraps the errors that
// mean this machine cannot make cgroups (a read-only cgroupfs, no
// permission).
func newCgroups(name string) (*cgroups, error) {
	roots, v2, err := hierarchies()
	if err != nil {
		return nil, err
	}
	// The kubelet uses cgroup v1 where the pids controller is mounted as
	// v1 (hybrid hosts too), and the cgroup2 hierarchy otherwise.
	c := &cgroups{name: name, roots: roots, track: v2}
	for _, r := range roots {
		if filepath.Base(r) == "pids" && r != v2 {
			c.track = r
		}
	}
	if c.track == "" {
		return nil, fmt.Errorf("%w: no pids controller and no cgroup2 hierarchy is mounted", errCannot)
	}
	for _, r := range roots {
		for _, sub := range []string{"", "pods"} {
			if err := mkCgroup(filepath.Join(r, name, sub)); err != nil {
				c.remove(context.Background())
				return nil, err
			}
		}
	}
	return c, mkCgroup(filepath.Join(c.track, name, "daemons"))
}

// errCannot marks a machine that cannot run containers.
var errCannot = errors.New("this machine cannot run containers")

func mkCgroup(dir string) error {
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		return fmt.Errorf("%w: cannot create cgroup %s: %v", errCannot, dir, err)
	}
	if err != nil {
		return err
	}
	// A new v1 cpuset is empty: give it its parent's CPUs and memory nodes.
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
		if err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
			return fmt.Errorf("copying %s to %s: %w", f, dir, err)
		}
	}
	return nil
}

// hierarchies lists the mounted cgroup hierarchies and the cgroup2 one
// ("" when there is none).
func hierarchies() (roots []string, v2 string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		pre, post, ok := strings.Cut(s.Text(), " - ")
		fields, typ := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(typ) < 1 {
			continue
		}
		switch typ[0] {
		case "cgroup":
			roots = append(roots, fields[4])
		case "cgroup2":
			roots, v2 = append(roots, fields[4]), fields[4]
		}
	}
	if len(roots) == 0 {
		return nil, "", fmt.Errorf("%w: no cgroup hierarchy is mounted", errCannot)
	}
	return roots, v2, s.Err()
}

// procs is the file a process writes its pid to to join <name>/daemons.
func (c *cgroups) procs() string {
	return filepath.Join(c.track, c.name, "daemons", "cgroup.procs")
}

// pids lists every process in the private cgroup.
func (c *cgroups) pids() []int { return c.pidsUnder("") }

// pidsUnder lists every process in the private cgroup's sub (such as
// "pods") and below it.
func (c *cgroups) pidsUnder(sub string) []int {
	var pids []int
	filepath.WalkDir(filepath.Join(c.track, c.name, sub), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "cgroup.procs" {
			return nil
		}
		data, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// remove kills every process left in the private cgroup and removes the
// cgroup, with what the kubelet and the runtime made under it, from every
// hierarchy.
func (c *cgroups) remove(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for pids := c.pids(); len(pids) > 0; pids = c.pids() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("processes %v outlive SIGKILL in cgroup %s", pids, c.name)
		}
	}
	var errs []error
	for _, r := range c.roots {
		errs = append(errs, rmTree(ctx, filepath.Join(r, c.name)))
	}
	return errors.Join(errs...)
}

// rmTree removes a cgroup directory and its children, deepest first,
// retrying while the kernel still counts exiting tasks.
func rmTree(ctx context.Context, top string) error {
	var dirs []string
	filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	slices.Reverse(dirs)
	for _, d := range dirs {
		for {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				break
			}
			if sleep(ctx, 50*time.Millisecond) != nil {
				return fmt.Errorf("removing cgroup %s: %w", d, err)
			}
		}
	}
	return nil
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
