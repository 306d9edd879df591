package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/cdi-exec/plugins/pkg/abnf"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/invoke"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1 // the command failed: a plugin, a store, nothing configured
	exitUsage  = 2
)

// env is the process state cdictl runs against, injected for tests.
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
}

// app holds the settings shared by every subcommand.
type app struct {
	env
	name string // "cdictl <command>", for messages
	// cfg is the suite's environment, read as the plugins read it;
	// --conf-dir, --path and --state-dir override its fields.
	cfg     protocol.Env
	timeout time.Duration
	output  string // "json" or "table"
}

func run(args []string, e env) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(e.stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if args[0] == "--version" {
		return printVersion(e.stdout)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.exec(e, args[1:])
		}
	}
	fmt.Fprintf(e.stderr, "cdictl: unknown command %q\n\n", args[0])
	usage(e.stderr)
	return exitUsage
}

// exec parses the command's flags and runs it.
func (c *command) exec(e env, args []string) int {
	a := &app{env: e, name: "cdictl " + c.name}
	fs, runCmd := a.flagSet(c)
	for _, arg := range args {
		if arg == "-h" || arg == "-help" || arg == "--help" || arg == "--h" {
			fs.SetOutput(e.stdout) // help that was asked for goes to stdout
		}
	}
	rest, err := parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	if a.output != "json" && a.output != "table" {
		fmt.Fprintf(e.stderr, "%s: -o must be json or table, not %q\n", a.name, a.output)
		return exitUsage
	}
	return runCmd(a, rest)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: cdictl COMMAND [flags] [args]\n\nThe reference caller of the CDI exec plugins.\n\nCommands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s %s\t%s\n", c.name, c.args, c.summary)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nRun 'cdictl COMMAND --help' for a command's flags and examples, 'cdictl --version' for this build.")
	fmt.Fprintln(w, "Environment: CDI_CONF_DIR, CDI_PATH, CDI_STATE_DIR, CDI_LOCK_TIMEOUT, and for plugins CDI_HOST_ROOT.")
}

// flagSet builds a subcommand's flags, the common ones and its own, and
// returns the function that runs it once they are parsed.
func (a *app) flagSet(c *command) (*flag.FlagSet, runFunc) {
	fs := flag.NewFlagSet(a.name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	var err error
	if a.cfg, err = protocol.ReadEnv(a.getenv); err != nil {
		fmt.Fprintf(a.stderr, "cdictl: warning: %v\n", err)
	}
	fs.StringVar(&a.cfg.ConfDir, "conf-dir", a.cfg.ConfDir, "config directory with <type>.d/*.conf")
	fs.StringVar(&a.cfg.Path, "path", a.cfg.Path, "plugin search path, colon-separated; passed to plugins as CDI_PATH")
	fs.StringVar(&a.cfg.StateDir, "state-dir", a.cfg.StateDir, "plugin state directory; passed to plugins as CDI_STATE_DIR")
	fs.DurationVar(&a.timeout, "timeout", invoke.DefaultTimeout, "deadline of each plugin run")
	defOut := "json"
	if isTerminal(a.stdout) {
		defOut = "table"
	}
	fs.StringVar(&a.output, "o", defOut, "output `json|table`: json when stdout is piped, table on a terminal")
	runCmd := c.setup(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: cdictl %s %s\n\n%s.\n\nExamples:\n  %s\n\nFlags:\n", c.name, c.args, c.summary, c.example)
		printFlags(fs)
	}
	return fs, runCmd
}

// printFlags lists the flags as the docs spell them: -o, and --name for
// the longer ones.
func printFlags(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		arg, usage := flag.UnquoteUsage(f)
		line := "  " + dash + f.Name
		if arg != "" {
			line += " " + arg
		}
		switch {
		case f.DefValue == "" || f.DefValue == "false":
		case arg == "string":
			usage += fmt.Sprintf(" (default %q)", f.DefValue)
		default:
			usage += fmt.Sprintf(" (default %v)", f.DefValue)
		}
		fmt.Fprintf(fs.Output(), "%s\n    \t%s\n", line, usage)
	})
}

// parse accepts flags before and after positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return rest, nil
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (a *app) usageErr(format string, args ...any) int {
	fmt.Fprintf(a.stderr, "%s: %s\nRun '%s --help' for usage.\n", a.name, fmt.Sprintf(format, args...), a.name)
	return exitUsage
}

// load reads every config, reporting unusable files on stderr.
func (a *app) load() []caller.Config {
	confs, probs := caller.Load(a.cfg.ConfDir)
	for _, p := range probs {
		fmt.Fprintf(a.stderr, "cdictl: skipping %v\n", p)
	}
	return confs
}

// configs returns the usable configs of the given types, in load order;
// every config when no type is given. A type without a usable config, or
// a config directory without any, is an error (code 4) naming the files
// searched.
func (a *app) configs(types ...string) ([]caller.Config, error) {
	all := a.load()
	dir, err := filepath.Abs(a.cfg.ConfDir)
	if err != nil {
		dir = a.cfg.ConfDir
	}
	if len(all) == 0 {
		return nil, protocol.NewError(protocol.CodeSpecUnsupported, "no usable plugin config: none in "+filepath.Join(dir, "*.d", "*.conf"))
	}
	if len(types) == 0 {
		return all, nil
	}
	for _, t := range types {
		if len(caller.OfType(all, t)) == 0 {
			return nil, protocol.NewError(protocol.CodeSpecUnsupported, fmt.Sprintf("no usable config for resource type %q: none in %s", t, filepath.Join(dir, t+".d", "*.conf")))
		}
	}
	return slices.DeleteFunc(all, func(c caller.Config) bool { return !slices.Contains(types, c.Type) }), nil
}

// caller runs plugins with the settings cdictl was given: the search path
// and state directory reach every plugin as CDI_PATH and CDI_STATE_DIR, so
// that a delegate is found on the same path and every command sees the
// same stores.
func (a *app) caller() caller.Caller {
	return caller.Caller{Path: a.cfg.Path, Timeout: a.timeout,
		Env: []string{protocol.EnvPath + "=" + a.cfg.Path, protocol.EnvStateDir + "=" + a.cfg.StateDir}}
}

func (a *app) ctx() context.Context { return context.Background() }

// typeArg returns the optional TYPE argument: no types or one.
func (a *app) typeArg(args []string) ([]string, bool) {
	switch len(args) {
	case 0:
		return nil, true
	case 1:
		if err := abnf.ValidType(args[0]); err != nil {
			a.usageErr("%v", err)
			return nil, false
		}
		return args, true
	}
	a.usageErr("takes at most one TYPE")
	return nil, false
}

// requestID validates an --id flag.
func (a *app) requestID(id string) (string, bool) {
	if id == "" {
		a.usageErr("--id is required")
		return "", false
	}
	if err := abnf.ValidRequestID(id); err != nil {
		a.usageErr("--id: %v", err)
		return "", false
	}
	return id, true
}
