// Package cdispec bridges our allocations to modern CDI: it writes one
// transient CDI spec file per plugin and request-id, in the JSON format of
// tags.cncf.io/container-device-interface, so that containerd, CRI-O and
// podman can inject the allocated device nodes by fully qualified name
// (vendor.com/class=name). It also removes those files again.
//
// Each file is owned by the store that wrote it, and its name says which
// (see Owner): stores and callers that share a kind and a directory only
// ever rewrite or remove their own files.
package cdispec

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/cdi-exec/plugins/internal/atomicfile"
	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/request"
)

// DefaultDir is where transient specs go unless the config says otherwise;
// CDI-aware runtimes read it by default.
const DefaultDir = "/var/run/cdi"

// Config is the cdi_spec arg of a plugin config.
type Config struct {
	Kind string `json:"kind"` // "<vendor>/<class>", for example "example.com/gpu"
	Dir  string `json:"dir"`  // default DefaultDir
	// ContainerEdits, when set, are added to the spec of every allocation
	// made under the config (edits.go).
	ContainerEdits *Edits `json:"container_edits,omitempty"`
}

// Parse decodes and validates a cdi_spec arg with the upstream naming
// rules.
func Parse(raw json.RawMessage) (*Config, error) {
	var c Config
	if err := rawjson.DecodeStrict(raw, &c); err != nil {
		if me := (*rawjson.MemberError)(nil); errors.As(err, &me) {
			return nil, me.Below("cdi_spec") // placed at args.cdi_spec.<member>
		}
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
	if err := c.ContainerEdits.Validate(); err != nil {
		return nil, fmt.Errorf("cdi_spec: container_edits: %w", err)
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

// KeyDeviceName is the name of one device's own entry in a request's
// spec: <request-id>_<key>, so that a caller that wants a single device
// of a request (the DRA mode, one request of a claim) can inject just it.
// The "_" that request-ids never contain keeps it apart from every
// request's own name. It is "" when the result is no valid CDI name (a key
// ending in "-", "." , ":" or "_"); such a device has no entry of its own.
func KeyDeviceName(requestID, key string) string {
	name := requestID + "_" + key
	if parser.ValidateDeviceName(name) != nil {
		return ""
	}
	return name
}

// prefix is the file name prefix of this kind's transient specs.
func (c *Config) prefix() string {
	vendor, class := parser.ParseQualifier(c.Kind)
	return vendor + "-" + class + "_"
}

// Owner is the store a spec file belongs to: the plugin and the identity
// of its allocation store.
type Owner struct {
	Plugin string // the plugin's binary name, "drm"
	Store  string // the store's identity, lower-case hex
}

// ErrForeign means a spec file for the request-id belongs to another store
// (or to no store: written by hand or by an older version).
var ErrForeign = errors.New("the CDI device name is taken by a spec file this store does not own")

// suffix ends the name of every spec file the owner writes.
func (o Owner) suffix() string { return "_" + o.Plugin + "-" + o.Store + ".json" }

// validID checks a request-id before it becomes part of a file name: only
// a valid one (ASCII letters, digits and hyphens: no "/", no ".") ever
// reaches a path, whoever sent it.
func validID(requestID string) error {
	if err := request.ValidRequestID(requestID); err != nil {
		return fmt.Errorf("no CDI spec path for request-id %q: %w", requestID, err)
	}
	return nil
}

func (o Owner) valid() error {
	if o.Plugin == "" || strings.ContainsAny(o.Plugin, "/_\x00") || o.Store == "" || strings.Trim(o.Store, "0123456789abcdef") != "" {
		return fmt.Errorf("invalid spec owner %q/%q", o.Plugin, o.Store)
	}
	return nil
}

// Path is the owner's transient spec file of a request-id, named by the
// upstream convention <vendor>-<class>_<transient id>.json, where the
// transient id is <request-id>_<plugin>-<store>. Request-ids never contain
// "_", so the name says unambiguously whose device it is and who owns it.
// Write and Remove check the request-id (validID) before they use the
// path; other callers must as well.
func (c *Config) Path(o Owner, requestID string) string {
	return filepath.Join(c.Dir, c.prefix()+requestID+o.suffix())
}

// FilePrefix is how the name of every spec file of this kind for the
// request-id starts, whichever store owns it: Path's name up to the
// owner. Request-ids never contain "_", so no other request's file starts
// with it. A caller that knows the request-id but not the owning store
// (the kubelet plugin, which sees only the CDI names an ADD answered)
// finds the request's file by it.
func (c *Config) FilePrefix(requestID string) string {
	return c.prefix() + requestID + "_"
}

// Written reports whether the config's directory holds a spec file of
// requestID, whichever store or driver wrote it: the files that define
// the request's CDI devices of this kind. A directory that is not there
// holds none.
func (c *Config) Written(requestID string) (bool, error) {
	if err := validID(requestID); err != nil {
		return false, err
	}
	entries, err := os.ReadDir(c.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cdi spec dir: %w", err)
	}
	prefix := c.FilePrefix(requestID)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) && strings.HasSuffix(e.Name(), ".json") {
			return true, nil
		}
	}
	return false, nil
}

// QualifiedName is the name runtimes inject the request's device by.
func (c *Config) QualifiedName(requestID string) string {
	return c.Kind + "=" + DeviceName(requestID)
}

// QualifiedKeyNames are the fully qualified names of the devices' own
// entries in the request's spec (KeyDeviceName), by key; a device without
// one is left out.
func (c *Config) QualifiedKeyNames(requestID string, devs []Device) map[string]string {
	out := map[string]string{}
	for _, d := range devs {
		if name := KeyDeviceName(requestID, d.Key); name != "" {
			out[d.Key] = c.Kind + "=" + name
		}
	}
	return out
}

// Device is one device of a request: its key and the nodes that stand for
// it in its own entry of the spec.
type Device struct {
	Key   string
	Nodes []Node
}

// Node is a device node to put in a spec.
type Node struct {
	Path string // as the container sees it, "/dev/dri/card0"
	// Major and Minor identify the device; zero when unknown (the runtime
	// then reads them from the host node).
	Type         string // "c" or "b"
	Major, Minor int64
	// Permissions are the cgroup device permissions the container gets
	// ("rw", "rwm"); "" leaves the runtime's default, "rwm".
	Permissions string
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

// Write writes the owner's spec of the request: one device named after
// the request with every node it holds, then one per device of devs
// (KeyDeviceName) with that device's nodes. It writes atomically: a temporary
// file in the same directory, rename, fsync of the file and the
// directory. Mode 0644, so runtimes that do not run as root can read it.
// It only ever replaces the owner's own file. If another file of this
// kind names the same request-id (another store's, or one without an
// owner), runtimes could not tell the two devices apart: Write refuses
// with ErrForeign, and when that file appeared while writing, or the
// file could not be made durable, it takes its own file back. It is a
// Publication's steps at once.
func (c *Config) Write(o Owner, requestID string, nodes []Node, devs []Device) error {
	if err := o.valid(); err != nil {
		return err
	}
	if err := validID(requestID); err != nil {
		return err
	}
	p := c.Stage()
	defer p.Close()
	if err := p.Write(o, requestID, nodes, devs); err != nil {
		return err
	}
	if err := p.Sync(); err != nil {
		_, werr := p.Withdraw()
		return errors.Join(err, werr)
	}
	return nil
}

// Publication writes one spec file in steps, so that a caller that holds
// its store's lock does under it only what must be done there
// (docs/cdi-bridge.md#consistency):
//
//   - Stage, before the lock, opens the directory and makes the new
//     file, unnamed (atomicfile.Open: its inode is allocated here);
//   - under the lock, Orphans lists the directory and finds the owner's
//     orphans, and Write refuses the request-id when another owner's file
//     defines it (ErrForeign), sweeps the owner's stale temporary files
//     and renames the spec into place, both from that one listing;
//   - Sync, after the lock, looks for another owner's file of the
//     request-id again (two stores writing the same name at once: the
//     later one sees the other, or both do; never neither), then fsyncs
//     the file and the directory.
//
// When Sync fails, the caller takes its allocation back under its lock
// again, with Withdraw. Close releases what Stage opened.
type Publication struct {
	c      *Config
	w      *atomicfile.Pending // nil until the directory is open
	o      Owner
	id     string
	names  []string // the directory as listed under the lock
	listed bool     // names is the listing
}

// Stage begins a publication in the config's directory. A directory that
// is not there yet, or cannot be opened now, is left to Write, which
// makes it or reports why not.
func (c *Config) Stage() *Publication {
	p := &Publication{c: c}
	p.w, _ = atomicfile.Open(c.Dir, 0o644)
	return p
}

// Orphans is Config.Orphans for a publication, whose Write sweeps: it
// lists the directory, once for Write as well, and returns the
// request-ids of o's files for which held reports false. A directory not
// there yet has none.
func (p *Publication) Orphans(o Owner, held func(id string) bool) ([]string, error) {
	if err := o.valid(); err != nil {
		return nil, err
	}
	if err := p.list(); err != nil {
		return nil, err
	}
	return p.c.orphans(p.names, o, held), nil
}

// list lists the directory once, if it is open.
func (p *Publication) list() error {
	if p.listed || p.w == nil {
		return nil
	}
	names, err := p.w.Names()
	if err != nil {
		return err
	}
	p.names, p.listed = names, true
	return nil
}

// Write puts the owner's spec of the request in place, without an fsync
// (Sync): the content and the refusals of Config.Write, from the listing
// of Orphans when it ran.
func (p *Publication) Write(o Owner, requestID string, nodes []Node, devs []Device) error {
	c := p.c
	if err := o.valid(); err != nil {
		return err
	}
	if err := validID(requestID); err != nil {
		return err
	}
	b, err := c.content(requestID, nodes, devs)
	if err != nil {
		return err
	}
	if p.w == nil {
		if err := os.MkdirAll(c.Dir, 0o755); err != nil {
			return err
		}
		if p.w, err = atomicfile.Open(c.Dir, 0o644); err != nil {
			return err
		}
	}
	if err := p.list(); err != nil {
		return err
	}
	p.o, p.id = o, requestID
	if err := c.foreign(p.names, o, requestID); err != nil {
		return err
	}
	p.w.Sweep(c.tempPattern(o), p.names)
	if err := p.w.Place(filepath.Base(c.Path(o, requestID)), c.tempPattern(o), b); err != nil {
		return fmt.Errorf("writing CDI spec: %w", err)
	}
	return nil
}

// Sync makes the written spec durable once no other owner's file defines
// the request-id: ErrForeign if one does now, else the fsyncs' error.
func (p *Publication) Sync() error {
	names, err := p.w.Names()
	if err != nil {
		return err
	}
	if err := p.c.foreign(names, p.o, p.id); err != nil {
		return err
	}
	if err := p.w.Sync(); err != nil {
		return fmt.Errorf("writing CDI spec: %w", err)
	}
	return nil
}

// Withdraw removes the spec Write put in place and reports whether it
// did: a file that a later writer of the owner has put there since, or
// removed, is left as it is. The caller holds its store's lock.
func (p *Publication) Withdraw() (bool, error) {
	if p.w == nil {
		return false, nil
	}
	return p.w.Withdraw()
}

// Close releases the directory and the file; a spec never written leaves
// nothing behind.
func (p *Publication) Close() {
	if p.w != nil {
		p.w.Close()
	}
}

// content is the spec file of a request: one device named after it, then
// one per device that has a name of its own.
func (c *Config) content(requestID string, nodes []Node, devs []Device) ([]byte, error) {
	entry := func(name string, nodes []Node) specs.Device {
		d := specs.Device{Name: name}
		for _, n := range nodes {
			d.ContainerEdits.DeviceNodes = append(d.ContainerEdits.DeviceNodes,
				&specs.DeviceNode{Path: n.Path, Type: n.Type, Major: n.Major, Minor: n.Minor, Permissions: n.Permissions})
		}
		return d
	}
	spec := &specs.Spec{Kind: c.Kind, Devices: []specs.Device{entry(DeviceName(requestID), nodes)}, ContainerEdits: c.ContainerEdits.Spec()}
	for _, d := range devs {
		if name := KeyDeviceName(requestID, d.Key); name != "" {
			spec.Devices = append(spec.Devices, entry(name, d.Nodes))
		}
	}
	v, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, err
	}
	spec.Version = v
	b, err := json.MarshalIndent(spec, "", "  ")
	return append(b, '\n'), err
}

// foreign returns ErrForeign naming the first spec file of this kind
// among names (a listing of the directory), not the owner's, that
// defines the request-id's device.
func (c *Config) foreign(names []string, o Owner, requestID string) error {
	mine := filepath.Base(c.Path(o, requestID))
	for _, name := range names {
		id, ok := strings.CutPrefix(name, c.prefix())
		if !ok || name == mine || !strings.HasSuffix(id, ".json") {
			continue
		}
		if id, _, _ = strings.Cut(strings.TrimSuffix(id, ".json"), "_"); id == requestID {
			return fmt.Errorf("%w: %s", ErrForeign, filepath.Join(c.Dir, name))
		}
	}
	return nil
}

// names lists the directory; a missing directory is empty.
func (c *Config) names() ([]string, error) {
	entries, err := os.ReadDir(c.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, err
}

// Remove deletes the owner's spec of the request; a missing file is fine.
// Files of other owners are never touched.
func (c *Config) Remove(o Owner, requestID string) error {
	if err := o.valid(); err != nil {
		return err
	}
	if err := validID(requestID); err != nil {
		return err
	}
	// unlink alone: os.Remove would try rmdir after a failed unlink, a
	// second syscall under the caller's lock for the usual missing file.
	path := c.Path(o, requestID)
	if err := unix.Unlink(path); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "remove", Path: path, Err: err}
	}
	return nil
}

// tempPattern is the pattern of the owner's temporary spec files
// (atomicfile.Options.Temp): hidden, named after the kind and the owner so that a sweep takes
// only its own, and without the .json that runtimes look for.
func (c *Config) tempPattern(o Owner) string {
	return ".tmp-" + c.prefix() + "*" + strings.TrimSuffix(o.suffix(), ".json")
}

// Orphans lists the request-ids that have a spec of this kind owned by o
// in the directory but for which held reports false. Other owners' files
// are not looked at. On the way it removes the owner's stale temporary
// files (atomicfile.Sweep).
func (c *Config) Orphans(o Owner, held func(id string) bool) ([]string, error) {
	if err := o.valid(); err != nil {
		return nil, err
	}
	names, err := c.names()
	if err != nil {
		return nil, err
	}
	atomicfile.SweepListed(c.Dir, c.tempPattern(o), names)
	return c.orphans(names, o, held), nil
}

// orphans are the request-ids of o's spec files among names for which
// held reports false.
func (c *Config) orphans(names []string, o Owner, held func(id string) bool) []string {
	var out []string
	for _, name := range names {
		id, ok := strings.CutPrefix(name, c.prefix())
		if !ok {
			continue
		}
		id, ok = strings.CutSuffix(id, o.suffix())
		if ok && !strings.Contains(id, "_") && !held(id) {
			out = append(out, id)
		}
	}
	return out
}
