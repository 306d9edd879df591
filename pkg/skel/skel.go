// Package skel is the protocol engine of the CDI exec plugins: it reads the
// environment and the config on stdin, applies the version rules and the
// order of checks, calls the plugin, and prints exactly one JSON object with
// the right exit status.
//
// Environment, stdin, stdout and stderr are injected through Dispatcher, so
// the whole protocol is testable in-process; Main wires them to the process.
package skel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cdi-exec/plugins/pkg/abnf"
	"github.com/cdi-exec/plugins/pkg/buildinfo"
	"github.com/cdi-exec/plugins/pkg/cdispec"
)

// Protocol versions.
const (
	// Latest is the newest protocol version this suite speaks.
	Latest = "0.0.2"
)

// SupportedVersions returns the protocol versions every plugin accepts,
// oldest first.
func SupportedVersions() []string { return []string{"0.0.1", "0.0.2"} }

// Supported reports whether v is a supported protocol version.
func Supported(v string) bool { return slices.Contains(SupportedVersions(), v) }

// Commands. CDI_COMMAND is matched case-insensitively.
const (
	CmdVersion = "VERSION"
	CmdInfo    = "INFO"
	CmdAdd     = "ADD"
	CmdDel     = "DEL"
	CmdGC      = "GC"      // extension, see docs/protocol.md
	CmdDevices = "DEVICES" // extension, see docs/protocol.md
)

// Defaults of the shared environment variables (RULINGS.md §6).
const (
	DefaultHostRoot    = "/"
	DefaultStateDir    = "/var/lib/cdi"
	DefaultPath        = "/opt/cdi/bin"
	DefaultConfDir     = "/etc/cdi"
	DefaultLockTimeout = 10 * time.Second
	maxConfigSize      = 1 << 20
	stdinTimeout       = 30 * time.Second
)

// Config is the JSON config a plugin receives on stdin.
type Config struct {
	CDIVersion string          `json:"cdiVersion"`
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Plugin     string          `json:"plugin"`
	Args       json.RawMessage `json:"args,omitempty"`
}

// DecodeArgs decodes the config's args into dst strictly: an unknown field
// is an error that names it, so a typo never silently widens what a plugin
// hands out. Absent args leave dst unchanged.
func (c Config) DecodeArgs(dst any) error {
	if len(c.Args) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(c.Args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return err
	}
	return nil
}

// Env holds the suite-wide settings taken from the environment once, so that
// no other package reads environment variables.
type Env struct {
	HostRoot    string        // CDI_HOST_ROOT
	StateDir    string        // CDI_STATE_DIR
	Path        string        // CDI_PATH
	ConfDir     string        // CDI_CONF_DIR
	LockTimeout time.Duration // CDI_LOCK_TIMEOUT
}

// Call is one validated invocation, handed to the plugin.
type Call struct {
	Command   string // upper case
	Version   string // the protocol version of the reply
	Config    Config
	Env       Env
	RequestID string       // ADD, DEL
	Request   abnf.Request // ADD
	// Locality lists the requested NUMA nodes; it is nil when
	// CDI_REQUEST_NUMA_LOCALITY was not given.
	Locality []int
	// ValidIDs is the set of request-ids a GC must keep.
	ValidIDs map[string]bool
	// CDISpec is the config's cdi_spec arg, taken out of Args before the
	// plugin sees them: when set, allocations are also published as
	// modern CDI spec files (docs/cdi-bridge.md).
	CDISpec *cdispec.Config
	// Stderr receives warnings meant for logs.
	Stderr io.Writer
}

// Warnf writes one warning line to stderr.
func (c *Call) Warnf(format string, args ...any) {
	if c.Stderr != nil {
		fmt.Fprintf(c.Stderr, "%s: warning: %s\n", c.Config.Plugin, fmt.Sprintf(format, args...))
	}
}

// AddResult is the answer to a successful ADD.
type AddResult struct {
	Devices []string
	// NUMA lists the NUMA nodes close to the allocated devices. It is
	// printed only when the caller asked for locality.
	NUMA []int
	// CDIDevices are fully qualified modern CDI device names, printed when
	// not empty.
	CDIDevices []string
}

// GCResult is the answer to a GC.
type GCResult struct {
	Freed  []string // request-ids whose allocations were freed
	Errors []string // per-id failures, for logging
}

// Plugin implements the commands of one plugin for one config.
type Plugin interface {
	Info(ctx context.Context, c *Call) (map[string]int, error)
	Add(ctx context.Context, c *Call) (*AddResult, error)
	Del(ctx context.Context, c *Call) error
}

// Collector is implemented by plugins that support the GC extension.
type Collector interface {
	GC(ctx context.Context, c *Call) (*GCResult, error)
}

// DeviceInfo is one device of a plugin's inventory (DEVICES extension).
type DeviceInfo struct {
	Key    string   `json:"key"`
	Nodes  []string `json:"nodes"`
	NUMA   int      `json:"numa"`
	Usable bool     `json:"usable"`
	Reason string   `json:"reason,omitempty"` // why it is not usable
	HeldBy string   `json:"heldBy,omitempty"` // request-id holding it
}

// Inventorier is implemented by plugins that support the DEVICES
// extension: every device they see, usable or not, and who holds it.
type Inventorier interface {
	Devices(ctx context.Context, c *Call) ([]DeviceInfo, error)
}

// About describes a plugin to the engine.
type About struct {
	// Subtypes lists the resource-subtypes ADD accepts besides the bare
	// type.
	Subtypes []string
	// New validates the config's args and returns the plugin. Its errors
	// are reported as invalid configuration (code 101) unless they already
	// carry a code.
	New func(c *Call) (Plugin, error)
}

// Dispatcher runs one invocation against injected process state.
type Dispatcher struct {
	Getenv func(string) string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Main runs the plugin as the current process and exits. A termination
// signal kills the process outright: every store change is one transaction,
// so nothing is left half-written.
func Main(about About) {
	if buildinfo.PrintIfAsked(os.Args[1:], os.Stderr, filepath.Base(os.Args[0]), SupportedVersions()) {
		os.Exit(0) // docs/protocol.md#plugin-command-line
	}
	d := Dispatcher{Getenv: os.Getenv, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	os.Exit(d.Run(context.Background(), about))
}

// Run executes one command and returns the process exit status.
func (d Dispatcher) Run(ctx context.Context, about About) int {
	cmd := strings.ToUpper(d.Getenv("CDI_COMMAND"))
	if cmd == CmdVersion {
		return d.print(0, []Field{
			{"cdiVersion", Latest},
			{"supportedVersions", SupportedVersions()},
		})
	}
	c := &Call{Command: cmd, Stderr: d.Stderr, Version: Latest}
	res, err := d.safeRun(ctx, about, c)
	if err != nil {
		return d.fail(c, err)
	}
	return d.print(0, res)
}

// safeRun is run with any panic turned into an internal error; the stack
// goes to stderr for the logs.
func (d Dispatcher) safeRun(ctx context.Context, about About, c *Call) (out []Field, err error) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(d.Stderr, "panic: %v\n%s", r, debug.Stack())
			out, err = nil, Errorf(CodeInternal, "panic: %v", r)
		}
	}()
	return d.run(ctx, about, c)
}

// run performs the checks of RULINGS.md §3 in order and calls the plugin.
// It returns the fields of the success answer (nil for none).
func (d Dispatcher) run(ctx context.Context, about About, c *Call) ([]Field, error) {
	stdin, readErr := readConfig(ctx, d.Stdin)

	// The reply's version: the first supported of env, config, Latest.
	envVersion := d.Getenv("CDI_VERSION")
	var probe struct {
		CDIVersion any `json:"cdiVersion"`
	}
	_ = json.Unmarshal(stdin, &probe)
	confVersion, _ := probe.CDIVersion.(string)
	switch {
	case Supported(envVersion):
		c.Version = envVersion
	case Supported(confVersion):
		c.Version = confVersion
	}

	if envVersion != "" && !Supported(envVersion) {
		return nil, NewError(CodeIncompatibleVersion, "Unsupported version: "+envVersion)
	}
	if readErr != nil {
		return nil, Errorf(CodeInvalidConfig, "reading stdin: %w", readErr)
	}
	var err error
	if c.Config, err = parseConfig(stdin); err != nil {
		return nil, err
	}
	if !Supported(c.Config.CDIVersion) {
		return nil, NewError(CodeIncompatibleConfigVersion, "Unsupported config version: "+c.Config.CDIVersion)
	}
	switch c.Command {
	case CmdInfo, CmdAdd, CmdDel:
	case CmdGC, CmdDevices:
		// Extensions, offered by plugins that implement them; checked below.
	case "":
		return nil, NewError(CodeCommandUnsupported, "CDI_COMMAND is not set")
	default:
		return nil, NewError(CodeCommandUnsupported, "Unsupported command: "+d.Getenv("CDI_COMMAND"))
	}
	c.Env = d.env(c)
	if err := takeCDISpec(c); err != nil {
		return nil, err
	}

	plugin, err := about.New(c)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			err = Errorf(CodeInvalidConfig, "args: %w", err)
		}
		return nil, err
	}
	collector, canGC := plugin.(Collector)
	inventorier, canList := plugin.(Inventorier)
	if c.Command == CmdGC && !canGC || c.Command == CmdDevices && !canList {
		return nil, NewError(CodeCommandUnsupported, "Unsupported command: "+d.Getenv("CDI_COMMAND"))
	}
	if err := d.parseRequest(about, c); err != nil {
		return nil, err
	}

	switch c.Command {
	case CmdInfo:
		caps, err := plugin.Info(ctx, c)
		if err != nil {
			return nil, err
		}
		return capacityFields(c, caps)
	case CmdAdd:
		res, err := plugin.Add(ctx, c)
		if err != nil {
			return nil, err
		}
		out := []Field{{"cdiVersion", c.Version}, {"devices", nonNil(res.Devices)}}
		if c.Locality != nil {
			out = append(out, Field{"numa_locality", nonNil(res.NUMA)})
		}
		if len(res.CDIDevices) > 0 {
			out = append(out, Field{"cdiDevices", res.CDIDevices})
		}
		return out, nil
	case CmdDel:
		return nil, plugin.Del(ctx, c)
	case CmdDevices:
		devs, err := inventorier.Devices(ctx, c)
		if err != nil {
			return nil, err
		}
		return []Field{{"cdiVersion", c.Version}, {"devices", nonNil(devs)}}, nil
	default: // CmdGC
		res, err := collector.GC(ctx, c)
		if err != nil {
			return nil, err
		}
		out := []Field{{"cdiVersion", c.Version}, {"freed", nonNil(res.Freed)}}
		if len(res.Errors) > 0 {
			out = append(out, Field{"errors", res.Errors})
		}
		return out, nil
	}
}

// takeCDISpec moves the shared cdi_spec arg from the args into the call,
// validated, so that every plugin offers it and none has to know it.
func takeCDISpec(c *Call) error {
	if !bytes.Contains(c.Config.Args, []byte(`"cdi_spec"`)) {
		return nil
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal(c.Config.Args, &args); err != nil {
		return Errorf(CodeInvalidConfig, "args: %w", err)
	}
	raw, ok := args["cdi_spec"]
	if !ok {
		return nil
	}
	spec, err := cdispec.Parse(raw)
	if err != nil {
		return Errorf(CodeInvalidConfig, "args: %w", err)
	}
	delete(args, "cdi_spec")
	if c.Config.Args, err = json.Marshal(args); err != nil {
		return Errorf(CodeInternal, "args: %w", err)
	}
	c.CDISpec = spec
	return nil
}

// parseRequest performs the command-specific checks of RULINGS.md §3.6.
func (d Dispatcher) parseRequest(about About, c *Call) error {
	switch c.Command {
	case CmdAdd, CmdDel:
		c.RequestID = d.Getenv("CDI_REQUEST_ID")
		if c.RequestID == "" {
			return NewError(CodeInvalidRequest, "CDI_REQUEST_ID is not set")
		}
		if err := abnf.ValidRequestID(c.RequestID); err != nil {
			return Errorf(CodeInvalidRequest, "CDI_REQUEST_ID: %w", err)
		}
	case CmdGC:
		raw, ok := d.lookupValidIDs()
		if !ok {
			return NewError(CodeInvalidRequest, "CDI_VALID_REQUEST_IDS is not set; refusing to collect without a list of valid request-ids")
		}
		c.ValidIDs = map[string]bool{}
		for id := range strings.SplitSeq(raw, ",") {
			if id == "" {
				continue
			}
			if err := abnf.ValidRequestID(id); err != nil {
				return Errorf(CodeInvalidRequest, "CDI_VALID_REQUEST_IDS: %w", err)
			}
			c.ValidIDs[id] = true
		}
	}
	if c.Command != CmdAdd {
		return nil
	}
	raw := d.Getenv("CDI_REQUEST")
	if raw == "" {
		return NewError(CodeInvalidRequest, "CDI_REQUEST is not set")
	}
	specs, err := abnf.RequestSpecs(raw)
	if err != nil {
		return Errorf(CodeInvalidRequest, "CDI_REQUEST: %w", err)
	}
	for _, s := range specs {
		if s.Type != c.Config.Type || s.Subtype != "" && !slices.Contains(about.Subtypes, s.Subtype) {
			return NewError(CodeSpecUnsupported, "Unsupported resource-spec: "+s.String())
		}
	}
	if c.Request, err = abnf.ParseRequest(raw); err != nil {
		return Errorf(CodeInvalidRequest, "CDI_REQUEST: %w", err)
	}
	if numa := d.Getenv("CDI_REQUEST_NUMA_LOCALITY"); numa != "" {
		if c.Locality, err = abnf.ParseNUMA(numa); err != nil {
			return Errorf(CodeInvalidRequest, "CDI_REQUEST_NUMA_LOCALITY: %w", err)
		}
	}
	return nil
}

// lookupValidIDs returns CDI_VALID_REQUEST_IDS. An empty list is legal (it
// frees everything) only when spelled as the single word "none", so a
// variable that is merely present but empty never wipes a node.
func (d Dispatcher) lookupValidIDs() (string, bool) {
	v := d.Getenv("CDI_VALID_REQUEST_IDS")
	switch v {
	case "":
		return "", false
	case "none":
		return "", true
	}
	return v, true
}

// env reads the shared environment variables, applying defaults.
func (d Dispatcher) env(c *Call) Env {
	get := func(name, def string) string {
		if v := d.Getenv(name); v != "" {
			return v
		}
		return def
	}
	e := Env{
		HostRoot:    get("CDI_HOST_ROOT", DefaultHostRoot),
		StateDir:    get("CDI_STATE_DIR", DefaultStateDir),
		Path:        get("CDI_PATH", DefaultPath),
		ConfDir:     get("CDI_CONF_DIR", DefaultConfDir),
		LockTimeout: DefaultLockTimeout,
	}
	if v := d.Getenv("CDI_LOCK_TIMEOUT"); v != "" {
		t, err := ParseTimeout(v)
		if err != nil {
			c.Warnf("ignoring CDI_LOCK_TIMEOUT: %v", err)
		} else {
			e.LockTimeout = t
		}
	}
	return e
}

// ParseTimeout parses a duration given either in Go syntax ("1.5s", "500ms")
// or as plain seconds ("10").
func ParseTimeout(s string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if n <= 0 || n > 24*3600 {
			return 0, fmt.Errorf("%q out of range", s)
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	t, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q", s)
	}
	if t <= 0 {
		return 0, fmt.Errorf("%q is not positive", s)
	}
	return t, nil
}

// readConfig reads stdin, bounded in size and time: a caller that never
// closes stdin gets an error instead of a hung plugin.
func readConfig(ctx context.Context, r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, errors.New("no stdin")
	}
	if f, ok := r.(*os.File); ok {
		return readFD(ctx, int(f.Fd()))
	}
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, maxConfigSize+1))
		ch <- result{b, err}
	}()
	timer := time.NewTimer(stdinTimeout)
	defer timer.Stop()
	select {
	case res := <-ch:
		if res.err == nil && len(res.b) > maxConfigSize {
			res.err = fmt.Errorf("config larger than %d bytes", maxConfigSize)
		}
		return res.b, res.err
	case <-timer.C:
		return nil, fmt.Errorf("no end of input after %v", stdinTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// parseConfig decodes the config and checks its required fields.
func parseConfig(b []byte) (Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || raw == nil {
		if len(bytes.TrimSpace(b)) == 0 {
			return Config{}, NewError(CodeInvalidConfig, "stdin is empty; the plugin's config must be passed on stdin")
		}
		if err == nil {
			err = errors.New("not an object")
		}
		return Config{}, Errorf(CodeInvalidConfig, "stdin is not a JSON object: %v", err)
	}
	var c Config
	for _, f := range []struct {
		name string
		dst  *string
	}{{"cdiVersion", &c.CDIVersion}, {"name", &c.Name}, {"type", &c.Type}, {"plugin", &c.Plugin}} {
		v, ok := raw[f.name]
		if !ok {
			return Config{}, Errorf(CodeInvalidConfig, "missing required field %q", f.name)
		}
		if err := json.Unmarshal(v, f.dst); err != nil || v[0] != '"' {
			return Config{}, Errorf(CodeInvalidConfig, "field %q must be a string", f.name)
		}
	}
	if err := abnf.ValidType(c.Type); err != nil {
		return Config{}, Errorf(CodeInvalidConfig, "field \"type\": %w", err)
	}
	if c.Plugin == "" || strings.ContainsAny(c.Plugin, "/\x00") {
		return Config{}, Errorf(CodeInvalidConfig, "field \"plugin\" must be a bare binary name, got %q", c.Plugin)
	}
	if a, ok := raw["args"]; ok && string(a) != "null" {
		if a[0] != '{' {
			return Config{}, NewError(CodeInvalidConfig, `field "args" must be an object`)
		}
		c.Args = a
	}
	return c, nil
}

// capacityFields renders an INFO answer: cdiVersion, the type, then any
// subtypes in name order. Keys outside the config's type are refused.
func capacityFields(c *Call, caps map[string]int) ([]Field, error) {
	out := []Field{{"cdiVersion", c.Version}, {c.Config.Type, caps[c.Config.Type]}}
	keys := make([]string, 0, len(caps))
	for k := range caps {
		if k == c.Config.Type {
			continue
		}
		if !strings.HasPrefix(k, c.Config.Type+"-") {
			return nil, Errorf(CodeInternal, "plugin reported capacity for %q outside type %q", k, c.Config.Type)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, Field{k, caps[k]})
	}
	return out, nil
}

// fail prints err as a protocol error object and returns the exit status:
// 1, except for DEL, which always exits 0.
func (d Dispatcher) fail(c *Call, err error) int {
	e := AsError(err)
	fields := []Field{{"cdiVersion", c.Version}, {"code", e.Code}, {"msg", e.Msg}}
	if e.Details != "" {
		fields = append(fields, Field{"details", e.Details})
	}
	status := 1
	if c.Command == CmdDel {
		status = 0
	}
	return d.print(status, fields)
}

// print writes fields as the single JSON object of this invocation. A nil
// fields prints nothing.
func (d Dispatcher) print(status int, fields []Field) int {
	if fields == nil {
		return status
	}
	b, err := EncodeObject(fields)
	if err != nil {
		fmt.Fprintf(d.Stderr, "encoding reply: %v\n", err)
		return status
	}
	if _, err := d.Stdout.Write(b); err != nil {
		fmt.Fprintf(d.Stderr, "writing reply: %v\n", err)
	}
	return status
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
