// Package cdispec bridges our allocations to modern CDI: it writes one
// transient CDI spec file per plugin and request-id, in the JSON format of
// tags.cncf.io/container-device-interface, so that containerd, CRI-O and
// podman can inject the allocated device nodes by fully qualified name
// (vendor.com/class=name). It also removes those files again.
package cdispec

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cdi-exec/plugins/pkg/protocol"
	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// DefaultDir is where transient specs go unless the config says otherwise;
// CDI-aware runtimes read it by default.
const DefaultDir = "/var/run/cdi"

// Config is the cdi_spec arg of a plugin config.
type Config struct {
	Kind string `json:"kind"` // "<vendor>/<class>", for example "example.com/gpu"
	Dir  string `json:"dir"`  // default DefaultDir
}

// Parse decodes and validates a cdi_spec arg with the upstream naming
// rules.
func Parse(raw json.RawMessage) (*Config, error) {
	var c Config
	if err := protocol.DecodeStrict(raw, &c); err != nil {
		return nil, fmt.Errorf("cdi_spec: %w", err)
	}
	vendor, class := parser.ParseQualifier(c.Kind)
	if vendor == "" {
		return nil, fmt.Errorf("cdi_spec: kind %q is not <vendor>/<class>", c.Kind)
	}
	if err := parser.ValidateVendorName(vendor); err != nil {
		return nil, fmt.Errorf("cdi_spec: kind %q: %w", c.Kind, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return nil, fmt.Errorf("cdi_spec: kind %q: %w", c.Kind, err)
	}
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if !filepath.IsAbs(c.Dir) {
		return nil, fmt.Errorf("cdi_spec: dir %q is not absolute", c.Dir)
	}
	return &c, nil
}

// DeviceName maps a request-id to a CDI device name. Request-ids are valid
// device names except that they may end in a hyphen, which CDI forbids;
// those get "_0" appended. Request-ids never contain "_", so the mapping is
// one to one.
func DeviceName(requestID string) string {
	if strings.HasSuffix(requestID, "-") {
		return requestID + "_0"
	}
	return requestID
}

// prefix is the file name prefix of this kind's transient specs.
func (c *Config) prefix() string {
	vendor, class := parser.ParseQualifier(c.Kind)
	return vendor + "-" + class + "_"
}

// Path is the transient spec file of a request-id, named by the upstream
// convention (<vendor>-<class>_<id>.json).
func (c *Config) Path(requestID string) string {
	return filepath.Join(c.Dir, c.prefix()+requestID+".json")
}

// QualifiedName is the name runtimes inject the request's device by.
func (c *Config) QualifiedName(requestID string) string {
	return c.Kind + "=" + DeviceName(requestID)
}

// Node is a device node to put in a spec.
type Node struct {
	Path string // as the container sees it, "/dev/dri/card0"
	// Major and Minor identify the device; zero when unknown (the runtime
	// then reads them from the host node).
	Type         string // "c" or "b"
	Major, Minor int64
}

// Stat fills a node's type and numbers from the host's node under root, or,
// when that is not a device (a fixture's placeholder), from the dev
// attribute sysfs keeps for it under class/*/<name>.
func Stat(root, path string) Node {
	n := Node{Path: path, Type: "c"}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(root, path), &st); err == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR, unix.S_IFBLK:
			if st.Mode&unix.S_IFMT == unix.S_IFBLK {
				n.Type = "b"
			}
			n.Major, n.Minor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
			return n
		}
	}
	base := filepath.Base(path)
	for _, class := range []string{"drm", "tty", "misc", "vfio"} {
		b, err := os.ReadFile(filepath.Join(root, "sys/class", class, base, "dev"))
		if err != nil {
			continue
		}
		if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &n.Major, &n.Minor); err == nil {
			return n
		}
	}
	return n
}

// Write writes the request's transient spec atomically: a temporary file in
// the same directory, fsync, rename, fsync of the directory. Mode 0644, so
// runtimes that do not run as root can read it.
func (c *Config) Write(requestID string, nodes []Node) error {
	spec := &specs.Spec{Kind: c.Kind, Devices: []specs.Device{{Name: DeviceName(requestID)}}}
	for _, n := range nodes {
		spec.Devices[0].ContainerEdits.DeviceNodes = append(spec.Devices[0].ContainerEdits.DeviceNodes,
			&specs.DeviceNode{Path: n.Path, Type: n.Type, Major: n.Major, Minor: n.Minor})
	}
	v, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return err
	}
	spec.Version = v
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(c.Dir, ".tmp-"+c.prefix()+"*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing CDI spec: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.Path(requestID)); err != nil {
		return fmt.Errorf("writing CDI spec: %w", err)
	}
	return syncDir(c.Dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Remove deletes the request's spec; a missing file is fine.
func (c *Config) Remove(requestID string) error {
	err := os.Remove(c.Path(requestID))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// staleTemp is how old a temporary spec file of this kind must be before
// Orphans removes it as the litter of a killed writer: a write takes
// milliseconds (docs/reliability.md).
const staleTemp = 5 * time.Minute

// Orphans lists the request-ids that have a spec of this kind in the
// directory but for which held reports false. On the way it removes this
// kind's temporary files that are older than staleTemp.
func (c *Config) Orphans(held func(id string) bool) ([]string, error) {
	entries, err := os.ReadDir(c.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	cutoff := time.Now().Add(-staleTemp)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-"+c.prefix()) {
			if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && fi.ModTime().Before(cutoff) {
				_ = os.Remove(filepath.Join(c.Dir, e.Name()))
			}
			continue
		}
		id, ok := strings.CutPrefix(e.Name(), c.prefix())
		if !ok {
			continue
		}
		id, ok = strings.CutSuffix(id, ".json")
		if ok && !held(id) {
			out = append(out, id)
		}
	}
	return out, nil
}
