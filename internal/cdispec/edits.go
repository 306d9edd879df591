package cdispec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"
)

// Edits is the container_edits member of a cdi_spec arg: CDI
// containerEdits that every allocation's spec carries besides its device
// nodes (docs/cdi-bridge.md#container-edits), such as the host's GPU driver
// libraries mounted read-only and the environment that finds them. They
// go in the spec's top-level containerEdits, which a runtime applies
// whenever it injects any device of the spec.
//
// Only env, mounts and hooks are accepted: device nodes are the plugin's,
// and the other edits (netDevices, intelRdt, additionalGids) have no use
// here. Validate applies the CDI library's own rules
// (tags.cncf.io/container-device-interface/pkg/cdi ContainerEdits.Validate),
// restated here because the plugins do not link that package (it brings
// the library's spec cache and OCI editing, which plugin binaries keep
// out: docs/performance.md); a test holds the two to the same answers,
// and cdictl validate runs the library's own.
type Edits struct {
	Env    []string       `json:"env,omitempty"`
	Mounts []*specs.Mount `json:"mounts,omitempty"`
	Hooks  []*specs.Hook  `json:"hooks,omitempty"`
}

// HookNames are the OCI hook names a CDI hook may have, as the CDI
// library accepts them.
func HookNames() []string {
	return []string{"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
}

// Validate checks the edits by the CDI library's rules: every env entry
// and hook env entry is NAME=value with a non-empty name, every hook has a
// known name and a path, every mount a host and a container path. A nil
// Edits is valid.
func (e *Edits) Validate() error {
	if e == nil {
		return nil
	}
	if err := validEnv(e.Env); err != nil {
		return fmt.Errorf("invalid container edits: %w", err)
	}
	for _, h := range e.Hooks {
		if h == nil {
			return errors.New("invalid hook: null")
		}
		known := false
		for _, n := range HookNames() {
			known = known || n == h.HookName
		}
		if !known {
			return fmt.Errorf("invalid hook name %q", h.HookName)
		}
		if h.Path == "" {
			return fmt.Errorf("invalid hook %q with empty path", h.HookName)
		}
		if err := validEnv(h.Env); err != nil {
			return fmt.Errorf("invalid hook %q: %w", h.HookName, err)
		}
	}
	for _, m := range e.Mounts {
		switch {
		case m == nil:
			return errors.New("invalid mount: null")
		case m.HostPath == "":
			return errors.New("invalid mount, empty host path")
		case m.ContainerPath == "":
			return errors.New("invalid mount, empty container path")
		}
	}
	return nil
}

func validEnv(env []string) error {
	for _, v := range env {
		if strings.IndexByte(v, '=') <= 0 {
			return fmt.Errorf("invalid environment variable %q", v)
		}
	}
	return nil
}

// Spec returns the edits as CDI containerEdits; the zero value for none.
func (e *Edits) Spec() specs.ContainerEdits {
	if e == nil {
		return specs.ContainerEdits{}
	}
	return specs.ContainerEdits{Env: e.Env, Mounts: e.Mounts, Hooks: e.Hooks}
}

// CheckHost reports the first mount whose host path does not exist on the
// host under root (CDI_HOST_ROOT, where every host read looks), and the
// first hook whose program does not: a spec that names them would fail in
// the runtime, or worse, bind an empty directory the runtime creates. A
// host path that is not absolute (the source of a tmpfs mount) is not
// looked up. nil when every one exists, or for no edits.
func (c *Config) CheckHost(root string) error {
	if c == nil || c.ContainerEdits == nil {
		return nil
	}
	check := func(what, p string) error {
		if !filepath.IsAbs(p) {
			return nil
		}
		if _, err := os.Lstat(filepath.Join(root, p)); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cdi_spec container_edits: %s %s does not exist on the host (under %s)", what, p, root)
		} else if err != nil {
			return fmt.Errorf("cdi_spec container_edits: %s %s: %w", what, p, err)
		}
		return nil
	}
	for _, m := range c.ContainerEdits.Mounts {
		if err := check("mount host path", m.HostPath); err != nil {
			return err
		}
	}
	for _, h := range c.ContainerEdits.Hooks {
		if err := check("hook path", h.Path); err != nil {
			return err
		}
	}
	return nil
}
