package cdispec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// A container_edits hook is a program the container runtime runs as root
// on the host, for every container that gets a device of the spec: whoever
// can replace that program, or rename a directory on its way, runs code as
// root on the node. So a hook's program, and every directory from the
// host's / down to it, must belong to root and be writable by nobody else
// (as sshd's StrictModes, and as the state directory's checks in
// internal/store); CheckHooks refuses any other, and `cdictl validate`
// reports it through the same check.

// maxLinks bounds the symbolic links followed on the way to a hook's
// program, as the kernel's ELOOP does.
const maxLinks = 40

// CheckHooks checks the program of every container_edits hook on the host
// under root (CDI_HOST_ROOT): the program and each directory that leads to
// it, symbolic links followed within root, must be owned by root (uid 0)
// and not writable by its group or others. A program that does not exist
// is CheckHost's to report, not this. nil when every hook passes, or for
// no hooks.
func (c *Config) CheckHooks(root string) error {
	if c == nil || c.ContainerEdits == nil {
		return nil
	}
	for _, h := range c.ContainerEdits.Hooks {
		if err := trustedProgram(root, h.Path); err != nil {
			return fmt.Errorf("cdi_spec container_edits: hook %s %s: %w", h.HookName, h.Path, err)
		}
	}
	return nil
}

// trustedProgram walks path from the host's / under root, one component at
// a time, and checks every directory it passes and the file it ends at
// (trusted). A symbolic link is followed within root: an absolute target
// from root, a relative one from the link's directory.
func trustedProgram(root, path string) error {
	if !filepath.IsAbs(path) {
		return errors.New("the program's path is not absolute")
	}
	cur := "/" // the host path reached, without root
	if err := trusted(root, cur, true); err != nil {
		return err
	}
	rest := strings.Split(strings.Trim(filepath.Clean(path), "/"), "/")
	for links := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(filepath.Join(root, next))
		if errors.Is(err, fs.ErrNotExist) {
			return nil // CheckHost reports it
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if links++; links > maxLinks {
				return fmt.Errorf("more than %d symbolic links on the way to %s", maxLinks, next)
			}
			target, err := os.Readlink(filepath.Join(root, next))
			if err != nil {
				return err
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			rest = append(strings.Split(target, "/"), rest...)
			continue
		}
		cur = next
		if err := trusted(root, cur, len(rest) > 0); err != nil {
			return err
		}
	}
	return nil
}

// trusted checks one directory (dir) or the program of a host path: root
// must own it and nobody else may write it. The message says what to fix.
func trusted(root, hostPath string, dir bool) error {
	fi, err := os.Lstat(filepath.Join(root, hostPath))
	if err != nil {
		return err
	}
	what := "the program"
	if dir {
		what = "the directory " + hostPath
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
		return fmt.Errorf("%s is owned by uid %d, not root: the runtime runs the hook as root, so that user could run anything as root on the node (chown root %s)", what, st.Uid, hostPath)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is writable by its group or others (mode %04o): the runtime runs the hook as root, so they could run anything as root on the node (chmod go-w %s)", what, fi.Mode().Perm(), hostPath)
	}
	return nil
}
