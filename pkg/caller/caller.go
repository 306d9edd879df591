// Package caller is the kubelet side of the protocol: it discovers plugin
// configs under the config directory, negotiates versions, and runs INFO,
// ADD, DEL and GC across every plugin of a node, with ADD all-or-nothing
// across plugins.
package caller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cdi-exec/plugins/pkg/abnf"
	"github.com/cdi-exec/plugins/pkg/invoke"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// Config is one plugin config file.
type Config struct {
	File       string `json:"file"`
	Type       string `json:"type"`
	Plugin     string `json:"plugin"`
	Name       string `json:"name"`
	CDIVersion string `json:"cdiVersion"`
	Raw        []byte `json:"-"`
}

// Problem is a config file that could not be used.
type Problem struct {
	File string
	Err  error
}

func (p Problem) Error() string { return p.File + ": " + p.Err.Error() }

// Load reads every <type>.d/*.conf under dir, sorted by folder and file
// name. Files that cannot be used are returned as problems; the rest load.
func Load(dir string) ([]Config, []Problem) {
	folders, err := filepath.Glob(filepath.Join(dir, "*.d"))
	if err != nil {
		return nil, []Problem{{File: dir, Err: err}}
	}
	slices.Sort(folders)
	var confs []Config
	var probs []Problem
	for _, folder := range folders {
		typ := strings.TrimSuffix(filepath.Base(folder), ".d")
		if err := abnf.ValidType(typ); err != nil {
			probs = append(probs, Problem{File: folder, Err: fmt.Errorf("folder name is not <resource-type>.d: %w", err)})
			continue
		}
		files, _ := filepath.Glob(filepath.Join(folder, "*.conf"))
		slices.Sort(files)
		for _, f := range files {
			c, err := loadFile(f, typ)
			if err != nil {
				probs = append(probs, Problem{File: f, Err: err})
				continue
			}
			confs = append(confs, c)
		}
	}
	return confs, probs
}

func loadFile(path, folderType string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	return parseConfig(path, raw, folderType)
}

// parseConfig checks a config file's content (protocol.ParseConfig) and
// its type against its folder.
func parseConfig(path string, raw []byte, folderType string) (Config, error) {
	pc, err := protocol.ParseConfig(raw)
	if err != nil {
		return Config{}, err
	}
	c := Config{File: path, Type: pc.Type, Plugin: pc.Plugin, Name: pc.Name, CDIVersion: pc.CDIVersion, Raw: raw}
	if c.Type != folderType {
		return c, fmt.Errorf("type %q does not match its folder %s.d", c.Type, folderType)
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
}

// PluginError is a failure of one plugin, naming its config.
type PluginError struct {
	Config Config
	Err    error // *invoke.Error or *invoke.RunError, or a negotiation failure
}

func (e *PluginError) Error() string {
	return fmt.Sprintf("%s (plugin %s): %v", e.Config.File, e.Config.Plugin, e.Err)
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

func (c Caller) run(ctx context.Context, conf Config, env ...string) (*invoke.Reply, error) {
	env = append(slices.Clip(c.Env), env...)
	r, err := invoke.Run(ctx, invoke.Call{Plugin: conf.Plugin, Path: c.Path, Env: env, Config: conf.Raw, Timeout: c.Timeout})
	if err != nil {
		return nil, &PluginError{Config: conf, Err: err}
	}
	return r, nil
}

// Versions asks a plugin which protocol versions it supports.
func (c Caller) Versions(ctx context.Context, conf Config) ([]string, error) {
	r, err := c.run(ctx, conf, protocol.EnvCommand+"="+protocol.CmdVersion)
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

// command runs one command after negotiating the version.
func (c Caller) command(ctx context.Context, conf Config, cmd string, env ...string) (*invoke.Reply, error) {
	v, err := c.Negotiate(ctx, conf)
	if err != nil {
		return nil, err
	}
	return c.run(ctx, conf, append([]string{protocol.EnvCommand + "=" + cmd, protocol.EnvVersion + "=" + v}, env...)...)
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

// Added is what one plugin handed out.
type Added struct {
	Config  Config
	Devices []string
	NUMA    []int
	Extra   map[string]json.RawMessage // further fields of the answer
}

// Add runs ADD for one plugin.
func (c Caller) Add(ctx context.Context, conf Config, id string, items []abnf.Item, numa []int) (*Added, error) {
	env := []string{protocol.EnvRequest + "=" + abnf.Request{Items: items}.String(), protocol.EnvRequestID + "=" + id}
	if numa != nil {
		env = append(env, protocol.EnvNUMA+"="+abnf.FormatNUMA(numa))
	}
	return c.add(ctx, conf, env)
}

// add runs ADD with env and decodes the answer.
func (c Caller) add(ctx context.Context, conf Config, env []string) (*Added, error) {
	r, err := c.command(ctx, conf, protocol.CmdAdd, env...)
	if err != nil {
		return nil, err
	}
	a := &Added{Config: conf, Extra: map[string]json.RawMessage{}}
	if err := json.Unmarshal(r.Object["devices"], &a.Devices); err != nil || a.Devices == nil {
		return nil, &PluginError{Config: conf, Err: fmt.Errorf("ADD answer has no devices list: %s", r.Raw)}
	}
	if raw, ok := r.Object["numa_locality"]; ok {
		_ = json.Unmarshal(raw, &a.NUMA)
	}
	for k, v := range r.Object {
		if k != "cdiVersion" && k != "devices" && k != "numa_locality" {
			a.Extra[k] = v
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

// AddAll allocates a request across the node's plugins, all or nothing.
// Items are routed to the configs of their type in load order; a config
// that answers 103 (not enough) or 4 (unsupported spec) passes the items to
// the next config of the type. If any type cannot be served, everything
// this call added is deleted again and the failure is returned.
func (c Caller) AddAll(ctx context.Context, confs []Config, id string, req abnf.Request, numa []int) ([]*Added, error) {
	var types []string
	byType := map[string][]abnf.Item{}
	for _, it := range req.Items {
		if _, ok := byType[it.Spec.Type]; !ok {
			types = append(types, it.Spec.Type)
		}
		byType[it.Spec.Type] = append(byType[it.Spec.Type], it)
	}
	var done []*Added
	for _, typ := range types {
		a, err := c.addType(ctx, OfType(confs, typ), typ, id, byType[typ], numa)
		if err != nil {
			c.rollback(ctx, done, id)
			return nil, err
		}
		done = append(done, a)
	}
	return done, nil
}

func (c Caller) addType(ctx context.Context, confs []Config, typ, id string, items []abnf.Item, numa []int) (*Added, error) {
	if len(confs) == 0 {
		return nil, protocol.NewError(protocol.CodeSpecUnsupported, fmt.Sprintf("Unsupported resource-spec: %s (no config in %s.d)", typ, typ))
	}
	var last error
	for _, conf := range confs {
		a, err := c.Add(ctx, conf, id, items, numa)
		if err == nil {
			return a, nil
		}
		last = err
		var pe *PluginError
		if errors.As(err, &pe) && (pe.Code() == protocol.CodeInsufficient || pe.Code() == protocol.CodeSpecUnsupported) {
			continue
		}
		break
	}
	return nil, last
}

// rollback deletes what an AddAll had added, newest first.
func (c Caller) rollback(ctx context.Context, done []*Added, id string) {
	for i := len(done) - 1; i >= 0; i-- {
		// DEL never fails the caller; a failure here is already logged by
		// the plugin and will be caught by GC.
		_, _ = c.Del(ctx, done[i].Config, id)
	}
}
