package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cdi-exec/plugins/internal/nearmiss"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/invoke"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
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
	// environ lists the environment, to warn about misspelt CDI_*
	// variables; nil in tests that need no such warning.
	environ func() []string
	stdout  io.Writer
	stderr  io.Writer
}

// app holds the settings shared by every subcommand.
type app struct {
	env
	name string // "cdictl <command>", for messages
	// cfg is the suite's environment, read as the plugins read it;
	// --conf-dir, --path and --state-dir override its fields.
	cfg     protocol.Env
	timeout time.Duration
	output  string // -o: json, yaml, table or wide (a table with more columns)
	// noHeaders leaves out a table's header line.
	noHeaders bool
	// empty names what the command's table lists (command.empty).
	empty string
	// configFailed is set by load when a config file it found cannot be
	// used: the command then exits 1 (status).
	configFailed bool
	broken       []caller.Problem // every config file load could not use
	// call is the last Caller made, with the cache of negotiated
	// versions the process's plugin runs share.
	call caller.Caller
}

// run runs cdictl with args (without the program name) and returns the
// exit status. The commands are built with cobra: help (`cdictl help
// COMMAND`, --help), shell completion, "did you mean" for commands, and
// flags before or after the arguments come from it.
func run(args []string, e env) int {
	if len(args) == 1 && args[0] == "--version" {
		return printVersion(e.stdout)
	}
	root, status := newRoot(e)
	if len(args) == 0 {
		usage(e.stdout, root)
		return exitUsage
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err != nil {
		return usageError(e, cmd, err)
	}
	return *status
}

// newRoot builds the command tree. The status of the command that runs is
// stored in *status.
func newRoot(e env) (*cobra.Command, *int) {
	status := exitOK
	root := &cobra.Command{
		Use:           "cdictl",
		Short:         "The reference caller of the CDI exec plugins",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetHelpFunc(help)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	// The suite's environment, read as the plugins read it, once; a bad
	// value is warned about when a command runs.
	cfg, envErr := protocol.ReadEnv(e.getenv)
	for _, c := range commands() {
		a := &app{env: e, name: "cdictl " + c.name, cfg: cfg, empty: c.empty}
		cc := &cobra.Command{
			Use:                   c.name + " " + c.args,
			Short:                 c.summary,
			Example:               "  " + c.example,
			DisableFlagsInUseLine: true,
		}
		runCmd := a.flags(cc.Flags(), c)
		for _, group := range c.exclusive {
			cc.MarkFlagsMutuallyExclusive(group...)
		}
		a.completions(cc, c)
		cc.RunE = func(cmd *cobra.Command, args []string) error {
			if envErr != nil {
				fmt.Fprintf(a.stderr, "cdictl: warning: %v\n", envErr)
			}
			if e.environ != nil {
				environ := e.environ()
				if cmd.Flags().Changed("state-dir") {
					environ = append(environ, protocol.EnvStateDir+"="+a.cfg.StateDir)
				}
				for _, w := range protocol.EnvNearMisses(environ) {
					fmt.Fprintf(a.stderr, "cdictl: warning: %s\n", w)
				}
			}
			if !slices.Contains(outputFormats(), a.output) {
				status = a.usageErr("-o must be one of %s, not %q", strings.Join(outputFormats(), ", "), a.output)
				return nil
			}
			status = runCmd(a, args)
			return nil
		}
		root.AddCommand(cc)
	}
	// Completion scripts for bash, zsh and fish are cobra's: they ask
	// cdictl itself for commands and flags. Powershell is for Windows.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Use = "completion bash|zsh|fish"
			// A shell that is not one of these (powershell) is a usage
			// error, exit 2, not the command's help.
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(_ *cobra.Command, args []string) error {
				if len(args) == 0 {
					return errors.New("name a shell: bash, zsh or fish")
				}
				return fmt.Errorf("no completion for %q: the shells are bash, zsh and fish", args[0])
			}
			for _, sub := range c.Commands() {
				if sub.Name() == "powershell" {
					c.RemoveCommand(sub)
				}
			}
		}
	}
	return root, &status
}

// usageError reports a command line cobra refused (an unknown command or
// flag, a missing or extra flag value, conflicting flags) with a hint for
// a misspelt flag and the command's usage line, not its every flag. It
// returns exitUsage.
func usageError(e env, cmd *cobra.Command, err error) int {
	msg := strings.TrimSpace(err.Error())
	if m := flagGroup.FindStringSubmatch(msg); m != nil {
		names := strings.Fields(m[1])
		for i := range names {
			names[i] = "--" + names[i]
		}
		slices.Sort(names)
		msg = strings.Join(names, " and ") + " cannot be given together: give one of them"
	}
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		name, _, _ = strings.Cut(name, "=")
		var known []string
		cmd.Flags().VisitAll(func(f *pflag.Flag) { known = append(known, f.Name) })
		if near, ok := nearmiss.Closest(name, known); ok {
			msg += fmt.Sprintf("\n\nDid you mean this?\n\t--%s", near)
		}
	}
	fmt.Fprintf(e.stderr, "%s: %s\n", cmd.CommandPath(), msg)
	if cmd.HasParent() {
		fmt.Fprintf(e.stderr, "Usage: %s\n", cmd.UseLine())
	}
	fmt.Fprintf(e.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	return exitUsage
}

// usage lists the commands, for `cdictl`, `cdictl --help` and `cdictl
// help`.
func usage(w io.Writer, root *cobra.Command) {
	fmt.Fprintln(w, "Usage: cdictl COMMAND [flags] [args]\n\nThe reference caller of the CDI exec plugins.\n\nCommands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() || c.Name() == "help" {
			fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(strings.TrimPrefix(c.UseLine(), "cdictl ")), c.Short)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "\nRun 'cdictl help COMMAND' or 'cdictl COMMAND --help' for a command's flags and examples, 'cdictl --version' for this build.")
	fmt.Fprintln(w, "Environment: CDI_CONF_DIR, CDI_PATH, CDI_STATE_DIR, CDI_LOCK_TIMEOUT, and for plugins CDI_HOST_ROOT.")
}

// help is the help of every command: its synopsis, summary, examples,
// subcommands and flags, spelled as docs/cdictl.md spells them.
func help(cmd *cobra.Command, _ []string) {
	w := cmd.OutOrStdout()
	if !cmd.HasParent() {
		usage(w, cmd)
		return
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s.\n", cmd.UseLine(), strings.TrimSuffix(cmd.Short, "."))
	if cmd.Example != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", cmd.Example)
	}
	if cmd.HasAvailableSubCommands() {
		fmt.Fprintln(w, "\nCommands:")
		for _, c := range cmd.Commands() {
			if c.IsAvailableCommand() {
				fmt.Fprintf(w, "  %s\t%s\n", c.Name(), c.Short)
			}
		}
	}
	fmt.Fprintln(w, "\nFlags:")
	printFlags(w, cmd.Flags())
}

// flags registers the common flags and the command's own on fs, and
// returns the function that runs the command once they are parsed.
func (a *app) flags(fs *pflag.FlagSet, c *command) runFunc {
	fs.SortFlags = false
	fs.StringVar(&a.cfg.ConfDir, "conf-dir", a.cfg.ConfDir, "config directory with <type>.d/*.conf")
	fs.StringVar(&a.cfg.Path, "path", a.cfg.Path, "plugin search path, colon-separated; passed to plugins as CDI_PATH")
	fs.StringVar(&a.cfg.StateDir, "state-dir", a.cfg.StateDir, "plugin state directory; passed to plugins as CDI_STATE_DIR")
	fs.DurationVar(&a.timeout, "timeout", invoke.DefaultTimeout, "deadline of each plugin run")
	defOut := "json"
	if isTerminal(a.stdout) {
		defOut = "table"
	}
	fs.StringVarP(&a.output, "output", "o", defOut, "output `json|yaml|table|wide`: json when stdout is piped, table on a terminal")
	fs.BoolVar(&a.noHeaders, "no-headers", false, "leave out the header line of a table")
	return c.setup(fs)
}

// printFlags lists the flags as the docs spell them: --name and, where
// there is one, its one-letter form.
func printFlags(w io.Writer, fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		arg, usage := pflag.UnquoteUsage(f)
		line := "  --" + f.Name
		if f.Shorthand != "" {
			line += ", -" + f.Shorthand
		}
		if arg != "" && arg != "bool" {
			line += " " + arg
		}
		switch {
		case f.DefValue == "" || f.DefValue == "false" || f.DefValue == "[]":
		case arg == "string":
			usage += fmt.Sprintf(" (default %q)", f.DefValue)
		default:
			usage += fmt.Sprintf(" (default %v)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, usage)
	})
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

// load reads every config, reporting unusable files and warnings on
// stderr, each with its file, line and column, and keeps the unusable
// ones in broken.
func (a *app) load() []caller.Config {
	confs, probs := caller.Load(a.cfg.ConfDir)
	for _, p := range probs {
		if p.Warning {
			fmt.Fprintf(a.stderr, "cdictl: warning: %v\n", p)
			continue
		}
		fmt.Fprintf(a.stderr, "cdictl: config not used: %v\n", p)
		a.broken = append(a.broken, p)
	}
	return confs
}

// configs returns the usable configs of the given types, in load order;
// every config when no type is given. A type without a usable config, or
// a config directory without any, is an error (code 4) naming the files
// searched.
//
// A config file of those types that cannot be used (or of any type, when
// none is given) makes the command fail (configFailed) once it has done
// what it could with the others.
func (a *app) configs(types ...string) ([]caller.Config, error) {
	all := a.load()
	for _, p := range a.broken {
		if len(types) == 0 || slices.Contains(types, folderType(p.File)) {
			a.configFailed = true
		}
	}
	if err := a.cfg.HostRootProblem(); err != nil {
		fmt.Fprintf(a.stderr, "cdictl: warning: %v\n", err)
	}
	dir, err := filepath.Abs(a.cfg.ConfDir)
	if err != nil {
		dir = a.cfg.ConfDir
	}
	if len(all) == 0 {
		return nil, a.noConfig(dir)
	}
	if len(types) == 0 {
		return all, nil
	}
	for _, t := range types {
		if len(caller.OfType(all, t)) == 0 {
			msg := fmt.Sprintf("no usable config for resource type %q: none in %s", t, filepath.Join(dir, t+".d", "*.conf"))
			if near, ok := nearType(t, all); ok {
				msg += fmt.Sprintf("; did you mean %q?", near)
			}
			for _, p := range a.broken {
				if folderType(p.File) == t {
					msg += "; not used: " + p.Error()
				}
			}
			return nil, protocol.NewError(protocol.CodeSpecUnsupported, msg)
		}
	}
	return slices.DeleteFunc(all, func(c caller.Config) bool { return !slices.Contains(types, c.Type) }), nil
}

// noConfig is the error for a config directory without a usable config.
// A directory that is not there is code 101 (the node's configuration),
// named with the two ways to fix it; one that is there but holds no
// usable config is code 4, naming the files searched.
func (a *app) noConfig(dir string) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		what := "does not exist"
		if err == nil {
			what = "is not a directory"
		} else if !errors.Is(err, fs.ErrNotExist) {
			what = "cannot be read: " + err.Error()
		}
		return protocol.Errorf(protocol.CodeInvalidConfig,
			"config directory %s %s: install the shipped configs there (make install-conf, or the .deb), or set %s (or --conf-dir) to a directory of <type>.d/*.conf",
			dir, what, protocol.EnvConfDir)
	}
	return protocol.NewError(protocol.CodeSpecUnsupported, fmt.Sprintf(
		"no usable plugin config: none in %s (make install-conf installs the shipped ones; %s or --conf-dir sets the directory)",
		filepath.Join(dir, "*.d", "*.conf"), protocol.EnvConfDir))
}

// nearType is the configured type that t probably means: the same
// letters in another case (types are case-sensitive: TTY is not tty), or
// a near miss.
func nearType(t string, confs []caller.Config) (string, bool) {
	var types []string
	for _, c := range confs {
		if strings.EqualFold(c.Type, t) {
			return c.Type, true
		}
		types = append(types, c.Type)
	}
	return nearmiss.Closest(t, types)
}

// flagGroup matches cobra's refusal of mutually exclusive flags, to say it
// in our words: "if any flags in the group [a b] are set none of the
// others can be; [b a] were all set".
var flagGroup = regexp.MustCompile(`^if any flags in the group \[[^\]]*\] are set none of the others can be; \[([^\]]*)\] were all set$`)

// folderType is the resource type of the <type>.d folder that holds the
// config file path, or that path is.
func folderType(path string) string {
	if t, ok := strings.CutSuffix(filepath.Base(path), ".d"); ok {
		return t
	}
	return strings.TrimSuffix(filepath.Base(filepath.Dir(path)), ".d")
}

// caller runs plugins with the settings cdictl was given: the search path
// and state directory reach every plugin as CDI_PATH and CDI_STATE_DIR, so
// that a delegate is found on the same path and every command sees the
// same stores. No owner is inherited from cdictl's environment: its
// allocations have none, and its GC keeps none unless gc says so.
func (a *app) caller() caller.Caller {
	c := caller.Caller{Path: a.cfg.Path, Timeout: a.timeout,
		Env: []string{protocol.EnvPath + "=" + a.cfg.Path, protocol.EnvStateDir + "=" + a.cfg.StateDir,
			protocol.EnvRequestOwner + "=", protocol.EnvKeepOwners + "="}}
	if a.call.Path != c.Path || a.call.Timeout != c.Timeout || !slices.Equal(a.call.Env, c.Env) {
		a.call = c.WithNegotiatedVersions()
	}
	return a.call
}

func (a *app) ctx() context.Context { return context.Background() }

// typeArg returns the optional TYPE argument: no types or one.
func (a *app) typeArg(args []string) ([]string, bool) {
	switch len(args) {
	case 0:
		return nil, true
	case 1:
		if err := request.ValidType(args[0]); err != nil {
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
	if err := request.ValidRequestID(id); err != nil {
		a.usageErr("--id: %v", err)
		return "", false
	}
	return id, true
}
