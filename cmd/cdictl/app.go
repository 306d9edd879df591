package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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
	exitFailed = 1 // a plugin failed
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
	name     string // "cdictl <command>", for messages
	confDir  string
	path     string
	stateDir string
	timeout  time.Duration
	output   string // "json" or "table"
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
	def := func(name, fallback string) string {
		if v := a.getenv(name); v != "" {
			return v
		}
		return fallback
	}
	fs.StringVar(&a.confDir, "conf-dir", def("CDI_CONF_DIR", protocol.DefaultConfDir), "config directory with <type>.d/*.conf")
	fs.StringVar(&a.path, "path", def("CDI_PATH", protocol.DefaultPath), "plugin search path, colon-separated")
	fs.StringVar(&a.stateDir, "state-dir", def("CDI_STATE_DIR", protocol.DefaultStateDir), "plugin state directory (for ls)")
	fs.DurationVar(&a.timeout, "timeout", invoke.DefaultTimeout, "deadline of each plugin run")
	defOut := "json"
	if isTerminal(a.stdout) {
		defOut = "table"
	}
	fs.StringVar(&a.output, "o", defOut, "output: json (default when piped) or table (default on a terminal)")
	runCmd := c.setup(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: cdictl %s %s\n\n%s.\n\nExamples:\n  %s\n\nFlags:\n", c.name, c.args, c.summary, c.example)
		fs.PrintDefaults()
	}
	return fs, runCmd
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

// configs loads the configs of typ ("" for all), reporting unusable files.
func (a *app) configs(typ string) []caller.Config {
	confs, probs := caller.Load(a.confDir)
	for _, p := range probs {
		fmt.Fprintf(a.stderr, "cdictl: skipping %v\n", p)
	}
	return caller.OfType(confs, typ)
}

func (a *app) caller() caller.Caller { return caller.Caller{Path: a.path, Timeout: a.timeout} }

func (a *app) ctx() context.Context { return context.Background() }

// pluginErr reports a plugin failure on stderr, naming config and plugin.
func (a *app) pluginErr(err error) {
	fmt.Fprintf(a.stderr, "cdictl: %v\n", err)
}

// typeArg returns the optional TYPE argument.
func (a *app) typeArg(args []string) (string, bool) {
	switch len(args) {
	case 0:
		return "", true
	case 1:
		if err := abnf.ValidType(args[0]); err != nil {
			a.usageErr("%v", err)
			return "", false
		}
		return args[0], true
	}
	a.usageErr("takes at most one TYPE")
	return "", false
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
