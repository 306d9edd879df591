package skel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// Dispatcher runs one invocation against injected process state.
type Dispatcher struct {
	Getenv func(string) string
	Args   []string // command-line arguments, without the program name
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Environ lists the environment as NAME=value pairs, read to warn
	// about misspelt CDI_* variables (protocol.EnvNearMisses) and to name
	// one in an error; nil for no such hints.
	Environ func() []string
}

// Main runs the plugin as the current process and exits. A termination
// signal kills the process outright: every store change is one transaction,
// so nothing is left half-written.
func Main(about About) {
	d := Dispatcher{Getenv: os.Getenv, Args: os.Args[1:], Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Environ: os.Environ}
	os.Exit(d.Run(context.Background(), about))
}

// Run executes one command and returns the process exit status. Run by
// hand, the plugin prints one line saying what it is and how it is called
// (byHand).
func (d *Dispatcher) Run(ctx context.Context, about About) int {
	if d.versionFlag(about) {
		return 0
	}
	if status, done := d.byHand(about); done {
		return status
	}
	cmd := protocol.Command(d.Getenv(protocol.EnvCommand))
	if cmd == protocol.CmdVersion {
		return d.print(0, []rawjson.Field{
			{Key: "cdiVersion", Value: protocol.Latest},
			{Key: "supportedVersions", Value: protocol.SupportedVersions()},
		})
	}
	c := &Call{Command: cmd, Stderr: d.Stderr, Version: protocol.Latest}
	res, err := d.safeRun(ctx, about, c)
	if err != nil {
		return d.fail(c, err)
	}
	return d.print(0, res)
}

// safeRun is run with any panic turned into an internal error; the stack
// goes to stderr for the logs.
func (d *Dispatcher) safeRun(ctx context.Context, about About, c *Call) (out []rawjson.Field, err error) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(d.Stderr, "panic: %v\n%s", r, debug.Stack())
			out, err = nil, protocol.Errorf(protocol.CodeInternal, "panic: %v", r)
		}
	}()
	return d.run(ctx, about, c)
}

// run performs the checks of docs/protocol.md#order-of-checks in order and
// calls the plugin. It returns the fields of the success answer (nil for
// none).
func (d *Dispatcher) run(ctx context.Context, about About, c *Call) ([]rawjson.Field, error) {
	if err := d.readConfig(ctx, c); err != nil {
		return nil, err
	}
	for _, m := range c.Config.NearMisses {
		c.Warnf("config: %v", m)
	}
	if err := d.checkCommand(c); err != nil {
		return nil, err
	}
	env, err := protocol.ReadEnv(d.Getenv)
	if err != nil {
		c.Warnf("%v", err)
	}
	if d.Environ != nil {
		for _, w := range protocol.EnvNearMisses(d.Environ()) {
			c.Warnf("%s", w)
		}
	}
	c.Env = env
	if err := env.CheckRoots(); err != nil {
		return nil, err
	}
	plugin, err := d.start(about, c)
	if err != nil {
		return nil, err
	}
	if err := d.parseRequest(about, c); err != nil {
		return nil, err
	}
	return answer(ctx, plugin, c)
}

// readConfig reads stdin and sets the reply's version and the config:
// steps 1 to 4 of the order of checks. The reply's version is the first
// supported of the environment's, the config's, and Latest.
func (d *Dispatcher) readConfig(ctx context.Context, c *Call) error {
	stdin, readErr := readStdin(ctx, d.Stdin)
	envVersion := d.Getenv(protocol.EnvVersion)
	conf, confErr := protocol.ParseConfig(stdin)
	confVersion := conf.CDIVersion
	if confErr != nil {
		// The reply's version may still come from a config that is
		// otherwise wrong.
		var probe struct {
			CDIVersion any `json:"cdiVersion"`
		}
		_ = json.Unmarshal(stdin, &probe)
		confVersion, _ = probe.CDIVersion.(string)
	}
	switch {
	case protocol.Supported(envVersion):
		c.Version = envVersion
	case protocol.Supported(confVersion):
		c.Version = confVersion
	}

	if envVersion != "" && !protocol.Supported(envVersion) {
		return protocol.NewError(protocol.CodeIncompatibleVersion, "Unsupported version: "+envVersion)
	}
	if readErr != nil {
		return protocol.Errorf(protocol.CodeInvalidConfig, "reading stdin: %w", readErr)
	}
	if confErr != nil {
		return configError(confErr)
	}
	c.Config = conf
	if !protocol.Supported(c.Config.CDIVersion) {
		return protocol.NewError(protocol.CodeIncompatibleConfigVersion, "Unsupported config version: "+c.Config.CDIVersion)
	}
	return nil
}

// configError is code 101 for a config that ParseConfig refused.
func configError(err error) error {
	switch {
	case errors.Is(err, protocol.ErrEmpty):
		return protocol.NewError(protocol.CodeInvalidConfig, "stdin is empty; the plugin's config must be passed on stdin")
	case errors.Is(err, protocol.ErrNotObject):
		return protocol.Errorf(protocol.CodeInvalidConfig, "stdin is %w", err)
	}
	return protocol.Errorf(protocol.CodeInvalidConfig, "%w", err)
}

// checkCommand refuses a command that is not one of the protocol's or our
// extensions'. Whether the plugin offers an extension is checked once it
// exists.
func (d *Dispatcher) checkCommand(c *Call) error {
	switch c.Command {
	case protocol.CmdInfo, protocol.CmdAdd, protocol.CmdDel, protocol.CmdGC, protocol.CmdDevices:
		return nil
	case "":
		return protocol.NewError(protocol.CodeCommandUnsupported, d.notSet(protocol.EnvCommand))
	}
	return d.unsupported()
}

// offers reports whether plugin implements cmd. Only the extensions are
// asked for, and only for their own commands (why:
// docs/performance.md#allocations-page-faults-syscalls).
func offers(plugin Plugin, cmd string) bool {
	switch cmd {
	case protocol.CmdGC:
		_, ok := plugin.(Collector)
		return ok
	case protocol.CmdDevices:
		_, ok := plugin.(Inventorier)
		return ok
	}
	return true
}

// ArgsError is the error of a plugin that its config's args could not
// make (About.New): code 101, unless the plugin said otherwise with a
// protocol error. An error about one member (a *rawjson.MemberError, as
// the strict decoding of the args and pool.StrictNUMA give) leads with the
// member's path below args ("args.rules[0].share: unknown field "share";
// did you mean "shares"?"), which cdictl validate turns into the line and
// column of the config file (caller.ArgsPlace). The dispatcher words
// every plugin's args errors so.
func ArgsError(err error) error {
	if e := (*protocol.Error)(nil); errors.As(err, &e) {
		return err
	}
	if me := (*rawjson.MemberError)(nil); errors.As(err, &me) {
		return protocol.Errorf(protocol.CodeInvalidConfig, "args.%s: %w", me.Name, me.Here())
	}
	return protocol.Errorf(protocol.CodeInvalidConfig, "args: %w", err)
}

func (d *Dispatcher) unsupported() error {
	return protocol.NewError(protocol.CodeCommandUnsupported, "Unsupported command: "+d.Getenv(protocol.EnvCommand))
}

// start makes the plugin from its args, and refuses an extension it does
// not implement.
func (d *Dispatcher) start(about About, c *Call) (Plugin, error) {
	plugin, err := about.New(c)
	if err != nil {
		return nil, ArgsError(err)
	}
	if !offers(plugin, c.Command) {
		return nil, d.unsupported()
	}
	return plugin, nil
}
