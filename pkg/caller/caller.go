// Package caller is the kubelet side of the protocol, for programs that
// run plugins: it discovers plugin configs under the config directory
// (with problems placed at file, line and column), negotiates the
// protocol version once per plugin binary, and runs one plugin's INFO,
// ADD (also pinned to device keys), DEL, GC and extensions, decoding
// their answers. Each run is reported to an optional Observer. An ADD
// across every plugin of a node, all or nothing, is cdictl's
// (cmd/cdictl/addall.go).
package caller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/invoke"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

// Config is one plugin config file.
type Config struct {
	File       string `json:"file"`
	Type       string `json:"type"`
	Plugin     string `json:"plugin"`
	Name       string `json:"name"`
	CDIVersion string `json:"cdiVersion"`
	Raw        []byte `json:"-"`
	// NearMisses are the config's misspelt top-level members
	// (protocol.Config.NearMisses).
	NearMisses []protocol.NearMiss `json:"-"`
}

// Problem is a config file that could not be used or, with Warning set,
// one that was used but probably does not say what was meant (a misspelt
// member), or a file that was not read but probably meant to be (a config
// outside a <type>.d folder, or not named *.conf).
type Problem struct {
	File      string
	Line, Col int // the place in File, from 1; 0 when the problem has none
	Err       error
	Warning   bool
}

func (p Problem) Error() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d:%d: %v", p.File, p.Line, p.Col, p.Err)
	}
	return p.File + ": " + p.Err.Error()
}

// Load reads every <type>.d/*.conf under dir, sorted by folder and file
// name. Files that cannot be used are returned as problems, with the line
// and column of the fault where it has one; the rest load. Warnings go
// with them: a misspelt top-level member, and a file that looks like a
// config in a place no caller reads.
func Load(dir string) ([]Config, []Problem) {
	folders, err := filepath.Glob(filepath.Join(dir, "*.d"))
	if err != nil {
		return nil, []Problem{{File: dir, Err: err}}
	}
	slices.Sort(folders)
	var confs []Config
	probs := strays(dir)
	for _, folder := range folders {
		if fi, err := os.Stat(folder); err != nil || !fi.IsDir() {
			continue
		}
		typ := strings.TrimSuffix(filepath.Base(folder), ".d")
		if err := request.ValidType(typ); err != nil {
			probs = append(probs, Problem{File: folder, Err: fmt.Errorf("folder name is not <resource-type>.d: %w", err)})
			continue
		}
		ents, _ := os.ReadDir(folder)
		for _, e := range ents {
			f := filepath.Join(folder, e.Name())
			if !strings.HasSuffix(e.Name(), ".conf") {
				if e.Type().IsRegular() && !leftover(e.Name()) {
					probs = append(probs, Problem{File: f, Warning: true, Err: errors.New("not read: only *.conf files are configs")})
				}
				continue
			}
			c, err := loadFile(f, typ)
			if err != nil {
				probs = append(probs, problem(f, c.Raw, err))
				continue
			}
			for _, m := range c.NearMisses {
				p := problem(f, c.Raw, &protocol.MemberError{Name: m.Name, Err: errors.New(m.String())})
				p.Warning = true
				probs = append(probs, p)
			}
			confs = append(confs, c)
		}
	}
	return confs, probs
}

// strays warns about configs directly in dir, and about folders that hold
// configs but are not named <type>.d: no caller reads them. JSON files
// directly in dir are left alone: they may be CDI spec files, which share
// /etc/cdi.
func strays(dir string) []Problem {
	ents, _ := os.ReadDir(dir)
	var probs []Problem
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		switch {
		case e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".conf"):
			probs = append(probs, Problem{File: p, Warning: true, Err: errors.New("not read: configs go in a <type>.d folder")})
		case e.IsDir() && !strings.HasSuffix(e.Name(), ".d") && request.ValidType(e.Name()) == nil:
			if confs, _ := filepath.Glob(filepath.Join(p, "*.conf")); len(confs) > 0 {
				probs = append(probs, Problem{File: p, Warning: true, Err: fmt.Errorf("not read: the configs of type %s go in %s.d", e.Name(), e.Name())})
			}
		}
	}
	return probs
}

// leftover reports whether a file name is one that editors and package
// managers leave beside a config, and that nobody means as one.
func leftover(name string) bool {
	return strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") ||
		strings.Contains(name, ".dpkg-") || strings.Contains(name, ".rpmnew") || strings.Contains(name, ".rpmsave")
}

// problem is err about the file f with content raw, placed at the fault:
// a JSON syntax error's offset, or the value of the member it names.
func problem(f string, raw []byte, err error) Problem {
	p := Problem{File: f, Err: err}
	off := -1
	var se *rawjson.SyntaxError
	var me *protocol.MemberError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &me):
		off = memberOffset(raw, me.Name)
	}
	if off >= 0 {
		p.Line, p.Col = lineCol(raw, off)
	}
	return p
}

// memberOffset returns the offset in raw of the value of the last
// top-level member called name (the one a "given twice" error is about),
// or -1.
func memberOffset(raw []byte, name string) int {
	obj, err := rawjson.Value(raw)
	if err != nil {
		return -1
	}
	off := -1
	_ = rawjson.Members(obj, func(n string, value []byte) error {
		if n == name {
			off = cap(raw) - cap(value) // value lies within raw
		}
		return nil
	})
	return off
}

// ArgsPlace places a plugin's refusal of a config (code 101) in the
// config file: details that start with a member path below args
// ("args.rules[1].paths[0]: ...", as the generic plugin words them) point
// at that member's value in raw. It reports 0, 0 when the details name no
// member that raw has.
func ArgsPlace(raw []byte, details string) (line, col int) {
	member, _, ok := strings.Cut(details, ": ")
	if !ok || !strings.HasPrefix(member, "args.") || strings.ContainsAny(member, " \t\"") {
		return 0, 0
	}
	return Place(raw, member)
}

// Place returns the line and column of the value of member in the config
// JSON raw: a dotted path with "[i]" for elements ("plugin",
// "args.rules[1].paths[0]"); 0, 0 when raw has no such member.
func Place(raw []byte, member string) (line, col int) {
	off := rawjson.Locate(raw, member)
	if off < 0 {
		return 0, 0
	}
	return lineCol(raw, off)
}

// lineCol turns a byte offset into a line and column, both from 1; the
// column counts bytes.
func lineCol(raw []byte, off int) (line, col int) {
	off = min(off, len(raw))
	line = 1 + bytes.Count(raw[:off], []byte("\n"))
	return line, off - bytes.LastIndexByte(raw[:off], '\n')
}

func loadFile(path, folderType string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := parseConfig(path, raw, folderType)
	c.Raw = raw
	return c, err
}

// parseConfig checks a config file's content (protocol.ParseConfig) and
// its type against its folder.
func parseConfig(path string, raw []byte, folderType string) (Config, error) {
	pc, err := protocol.ParseConfig(raw)
	if err != nil {
		return Config{}, err
	}
	c := Config{File: path, Type: pc.Type, Plugin: pc.Plugin, Name: pc.Name, CDIVersion: pc.CDIVersion, Raw: raw, NearMisses: pc.NearMisses}
	if c.Type != folderType {
		return c, &protocol.MemberError{Name: "type", Err: fmt.Errorf("type %q does not match its folder %s.d", c.Type, folderType)}
	}
	return c, nil
}

// OfType returns the configs serving typ ("" for all), in load order.
func OfType(confs []Config, typ string) []Config {
	if typ == "" {
		return confs
	}
	var out []Config
	for _, c := range confs {
		if c.Type == typ {
			out = append(out, c)
		}
	}
	return out
}

// Caller runs plugins.
type Caller struct {
	Path    string        // CDI_PATH
	Timeout time.Duration // per plugin run
	// Env holds NAME=value pairs every plugin run gets, before the
	// command's own (such as CDI_STATE_DIR).
	Env []string
	// Observer, when set, is told of every plugin run.
	Observer Observer

	// versions, when set (WithNegotiatedVersions), keeps the version
	// negotiated with each plugin binary.
	versions *negotiatedVersions
}

// Observer is told of every plugin run a Caller makes: the plugin, the
// command (VERSION, INFO, ADD, ...), the protocol code of the answer (0
// on success, 100 when the plugin gave no protocol answer) and how long
// the run took. It must be safe for concurrent use.
type Observer interface {
	ObservePluginRun(plugin, command string, code int, took time.Duration)
}

// PluginError is a failure of one plugin, naming its config.
type PluginError struct {
	Config Config
	Err    error // *invoke.Error or *invoke.RunError, or a negotiation failure
}

func (e *PluginError) Error() string {
	err := e.Err.Error()
	var re *invoke.RunError
	if errors.As(e.Err, &re) {
		err = re.Detail() // without the plugin's name, which is named here
	}
	return fmt.Sprintf("%s (plugin %s): %s", e.Config.File, e.Config.Plugin, err)
}

func (e *PluginError) Unwrap() error { return e.Err }

// Code returns the protocol code of the failure, or 100 when the plugin
// gave no protocol answer.
func (e *PluginError) Code() int {
	var pe *invoke.Error
	if errors.As(e.Err, &pe) {
		return pe.Code
	}
	return protocol.CodeInternal
}

// run runs the plugin of conf for the command cmd, with the Caller's
// environment, then env, and tells the Observer.
func (c Caller) run(ctx context.Context, conf Config, cmd string, env ...string) (*invoke.Reply, error) {
	env = append(append(slices.Clip(c.Env), protocol.EnvCommand+"="+cmd), env...)
	start := time.Now()
	r, err := invoke.Run(ctx, invoke.Call{Plugin: conf.Plugin, Path: c.Path, Env: env, Config: conf.Raw, Timeout: c.Timeout})
	var pe *PluginError
	if err != nil {
		pe = &PluginError{Config: conf, Err: err}
	}
	if c.Observer != nil {
		code := 0
		if pe != nil {
			code = pe.Code()
		}
		c.Observer.ObservePluginRun(conf.Plugin, cmd, code, time.Since(start))
	}
	if pe != nil {
		return nil, pe
	}
	return r, nil
}

// Versions asks a plugin which protocol versions it supports.
func (c Caller) Versions(ctx context.Context, conf Config) ([]string, error) {
	r, err := c.run(ctx, conf, protocol.CmdVersion)
	if err != nil {
		return nil, err
	}
	var vs []string
	if err := json.Unmarshal(r.Object["supportedVersions"], &vs); err != nil {
		return nil, &PluginError{Config: conf, Err: fmt.Errorf("VERSION answer has no supportedVersions list: %s", r.Raw)}
	}
	return vs, nil
}

// Negotiate returns the newest version both sides support.
func (c Caller) Negotiate(ctx context.Context, conf Config) (string, error) {
	theirs, err := c.Versions(ctx, conf)
	if err != nil {
		return "", err
	}
	ours := protocol.SupportedVersions()
	for i := len(ours) - 1; i >= 0; i-- {
		if slices.Contains(theirs, ours[i]) {
			return ours[i], nil
		}
	}
	return "", &PluginError{Config: conf, Err: fmt.Errorf("no common protocol version: plugin supports %v, we support %v", theirs, ours)}
}

// Extension runs one of our extension commands (such as DEVICES) and
// returns the plugin's answer.
func (c Caller) Extension(ctx context.Context, conf Config, cmd string, env ...string) (*invoke.Reply, error) {
	return c.command(ctx, conf, cmd, env...)
}

// Info returns a plugin's capacity per resource-spec.
func (c Caller) Info(ctx context.Context, conf Config) (map[string]int, error) {
	r, err := c.command(ctx, conf, protocol.CmdInfo)
	if err != nil {
		return nil, err
	}
	caps := map[string]int{}
	for k, v := range r.Object {
		if k == "cdiVersion" {
			continue
		}
		var n int
		if err := json.Unmarshal(v, &n); err != nil {
			return nil, &PluginError{Config: conf, Err: fmt.Errorf("INFO value of %q is not an integer: %s", k, v)}
		}
		caps[k] = n
	}
	return caps, nil
}

// Added is one plugin's ADD answer, decoded once: what it handed out and,
// for a config with a cdi_spec arg, the CDI devices that name it.
type Added struct {
	Config  Config
	Devices []string // host device node paths
	NUMA    []int    // numa_locality, when the plugin reports it
	// CDIDevices are the fully qualified CDI device names of the whole
	// request (cdiDevices); none when the config has no cdi_spec.
	CDIDevices []string
	// CDIKeyDevices maps a device key to its own CDI device name
	// (cdiKeyDevices), for plugins that give each device an entry.
	CDIKeyDevices map[string]string
}

// Add runs ADD for one plugin.
func (c Caller) Add(ctx context.Context, conf Config, id string, items []request.Item, numa []int) (*Added, error) {
	env := []string{protocol.EnvRequest + "=" + request.Request{Items: items}.String(), protocol.EnvRequestID + "=" + id}
	if numa != nil {
		env = append(env, protocol.EnvNUMA+"="+request.FormatNUMA(numa))
	}
	return c.add(ctx, conf, env)
}

// add runs ADD with env and decodes the answer.
func (c Caller) add(ctx context.Context, conf Config, env []string) (*Added, error) {
	r, err := c.command(ctx, conf, protocol.CmdAdd, env...)
	if err != nil {
		return nil, err
	}
	a := &Added{Config: conf}
	if err := json.Unmarshal(r.Object["devices"], &a.Devices); err != nil || a.Devices == nil {
		return nil, &PluginError{Config: conf, Err: fmt.Errorf("ADD answer has no devices list: %s", r.Raw)}
	}
	for _, f := range []struct {
		name string
		dst  any
	}{{"numa_locality", &a.NUMA}, {"cdiDevices", &a.CDIDevices}, {"cdiKeyDevices", &a.CDIKeyDevices}} {
		raw, ok := r.Object[f.name]
		if !ok {
			continue
		}
		if err := json.Unmarshal(raw, f.dst); err != nil && f.name != "numa_locality" {
			return nil, &PluginError{Config: conf, Err: fmt.Errorf("%s of the ADD answer: %w", f.name, err)}
		}
	}
	return a, nil
}

// Del runs DEL for one plugin. An unknown request-id (code 5) is reported
// as held=false, not as an error.
func (c Caller) Del(ctx context.Context, conf Config, id string) (held bool, err error) {
	_, err = c.command(ctx, conf, protocol.CmdDel, protocol.EnvRequestID+"="+id)
	var pe *invoke.Error
	if errors.As(err, &pe) && pe.Code == protocol.CodeUnknownRequestID {
		return false, nil
	}
	return err == nil, err
}

// GC runs the GC extension for one plugin and returns the freed ids.
func (c Caller) GC(ctx context.Context, conf Config, valid []string) ([]string, error) {
	list := strings.Join(valid, ",")
	if list == "" {
		list = protocol.NoValidIDs
	}
	r, err := c.command(ctx, conf, protocol.CmdGC, protocol.EnvValidIDs+"="+list)
	if err != nil {
		return nil, err
	}
	var freed []string
	_ = json.Unmarshal(r.Object["freed"], &freed)
	return freed, nil
}
