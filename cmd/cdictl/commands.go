package main

import "flag"

// commands lists the subcommands in the order help shows them. A new
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
	setup func(fs *flag.FlagSet) runFunc
}

// runFunc runs a command with its positional arguments and returns the
// exit status.
type runFunc func(a *app, args []string) int

// noFlags is the setup of a command without flags of its own.
func noFlags(run runFunc) func(*flag.FlagSet) runFunc {
	return func(*flag.FlagSet) runFunc { return run }
}
