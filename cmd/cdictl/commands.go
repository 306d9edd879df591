package main

import "github.com/spf13/pflag"

// commands lists the subcommands (help lists them by name). A new
// subcommand is one file that defines its *command and one line here.
func commands() []*command {
	return []*command{
		versionCommand(),
		infoCommand(),
		addCommand(),
		delCommand(),
		devicesCommand(),
		lsCommand(),
		gcCommand(),
		topologyCommand(),
		checkCommand(),
		validateCommand(),
		specsCommand(),
	}
}

// command is one subcommand.
type command struct {
	name    string
	args    string // synopsis after the name
	summary string
	example string // one or more lines, indented by two spaces after the first
	// setup registers the command's own flags on fs, bound to typed
	// variables it keeps, and returns the function that runs the command
	// once they are parsed. Use noFlags for a command with only the
	// common flags.
	setup func(fs *pflag.FlagSet) runFunc
	// exclusive lists groups of the command's flags of which at most one
	// may be given.
	exclusive [][]string
	// complete completes the positional arguments in a shell; nil
	// completes nothing. flagComplete completes the values of the
	// command's own flags, by name (completion.go).
	complete     completer
	flagComplete map[string]completer
	// empty names what the command's table lists ("devices"), for the
	// line that says it has none ("No devices found"); "" for a table
	// that always has rows (one per config or per type).
	empty string
}

// runFunc runs a command with its positional arguments and returns the
// exit status.
type runFunc func(a *app, args []string) int

// noFlags is the setup of a command without flags of its own.
func noFlags(run runFunc) func(*pflag.FlagSet) runFunc {
	return func(*pflag.FlagSet) runFunc { return run }
}
