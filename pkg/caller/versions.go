package caller

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"

	"github.com/cdi-exec/plugins/pkg/invoke"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// negotiatedVersions remembers the version negotiated with each plugin binary,
// so that a command costs one process start, not two (VERSION, then the
// command). An entry holds while the binary at its path is the same file
// with the same size and modification time; a replaced or rebuilt binary
// is asked again, and so is one that refuses the version (code 1). It is
// safe for concurrent use.
type negotiatedVersions struct {
	mu sync.Mutex
	m  map[string]negotiated // by the binary's path
}

// negotiated is one binary's version, and the binary it was agreed with.
type negotiated struct {
	bin     binary
	version string
}

// binary tells one file from another put in its place.
type binary struct {
	dev, ino  uint64
	size      int64
	mtimeNsec int64
}

// binaryAt identifies the file at path; ok is false when it cannot be
// read.
func binaryAt(path string) (binary, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return binary{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return binary{}, false
	}
	return binary{dev: uint64(st.Dev), ino: st.Ino, size: fi.Size(), mtimeNsec: fi.ModTime().UnixNano()}, true
}

// WithNegotiatedVersions returns c with a cache of negotiated versions, its
// own unless c has one already: the copies of the result share it. A
// Caller without one asks VERSION before every command.
func (c Caller) WithNegotiatedVersions() Caller {
	if c.versions == nil {
		c.versions = &negotiatedVersions{m: map[string]negotiated{}}
	}
	return c
}

// version returns the version to run conf's plugin with: the cached one
// when its binary is unchanged (cached true), else a fresh negotiation,
// cached.
func (c Caller) version(ctx context.Context, conf Config) (v string, cached bool, err error) {
	if c.versions == nil {
		v, err = c.Negotiate(ctx, conf)
		return v, false, err
	}
	path, err := invoke.Find(conf.Plugin, c.Path)
	if err != nil {
		v, err = c.Negotiate(ctx, conf) // fails with the run's own error
		return v, false, err
	}
	bin, ok := binaryAt(path)
	c.versions.mu.Lock()
	n, hit := c.versions.m[path]
	c.versions.mu.Unlock()
	if ok && hit && n.bin == bin {
		return n.version, true, nil
	}
	v, err = c.Negotiate(ctx, conf)
	if err != nil || !ok {
		return v, false, err
	}
	// The binary as it was before VERSION ran: one replaced meanwhile
	// does not match next time, and is asked again.
	c.versions.mu.Lock()
	c.versions.m[path] = negotiated{bin: bin, version: v}
	c.versions.mu.Unlock()
	return v, false, nil
}

// forget drops what was negotiated with conf's plugin.
func (c Caller) forget(conf Config) {
	if c.versions == nil {
		return
	}
	path, err := invoke.Find(conf.Plugin, c.Path)
	if err != nil {
		return
	}
	c.versions.mu.Lock()
	delete(c.versions.m, path)
	c.versions.mu.Unlock()
}

// command runs one command with the negotiated version. A plugin that
// refuses a cached version (code 1: a binary replaced without a change
// the cache sees, or one that changed its mind) is asked VERSION again,
// and the command is run once more; a refused fresh version is the
// answer.
func (c Caller) command(ctx context.Context, conf Config, cmd string, env ...string) (*invoke.Reply, error) {
	for retried := false; ; retried = true {
		v, cached, err := c.version(ctx, conf)
		if err != nil {
			return nil, err
		}
		r, err := c.run(ctx, conf, cmd, append([]string{protocol.EnvVersion + "=" + v}, env...)...)
		var pe *invoke.Error
		if cached && !retried && errors.As(err, &pe) && pe.Code == protocol.CodeIncompatibleVersion {
			c.forget(conf)
			continue
		}
		return r, err
	}
}
