package skel

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/internal/nearmiss"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// byHand answers a person rather than a caller, and reports whether it
// did and with which exit status. Callers pass no arguments and a config
// on stdin, so:
//   - --help or -h prints the one-line usage on stdout and exits 0;
//   - any other argument without CDI_COMMAND, or stdin on a terminal for
//     any command but VERSION (which reads no stdin), prints it on stderr
//     and exits 1 (DEL 0, as DEL always does) instead of waiting for a
//     config that nobody is going to send.
//
// The line names a set variable that is probably a misspelt CDI_COMMAND.
func (d *Dispatcher) byHand(about About) (status int, done bool) {
	if len(d.Args) == 1 && (d.Args[0] == "--help" || d.Args[0] == "-h") {
		fmt.Fprint(d.Stdout, usage(about, ""))
		return 0, true
	}
	cmd := protocol.Command(d.Getenv(protocol.EnvCommand))
	if cmd == "" && len(d.Args) > 0 || cmd != protocol.CmdVersion && isTerminal(d.Stdin) {
		hint := ""
		if cmd == "" {
			hint = d.didYouMean(protocol.EnvCommand)
		}
		fmt.Fprint(d.Stderr, usage(about, hint))
		if cmd == protocol.CmdDel {
			return 0, true
		}
		return 1, true
	}
	return 0, false
}

// isTerminal reports whether r is a terminal device.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// usage is the one line a plugin run by hand prints, with hint (from
// didYouMean) at its end.
func usage(about About, hint string) string {
	name := about.Name
	if name == "" {
		name = "plugin"
	}
	return fmt.Sprintf("%s: CDI exec plugin that %s; a caller (such as cdictl) runs it with %s=VERSION|INFO|ADD|DEL|GC|DEVICES and its JSON config on stdin%s\n",
		name, about.Summary, protocol.EnvCommand, hint)
}

// notSet is the error text for a required variable that is not set, with
// the set variable it is probably misspelt as.
func (d *Dispatcher) notSet(name string) string {
	return name + " is not set" + d.didYouMean(name)
}

// didYouMean names a set variable within a small edit distance of name,
// the unset variable wanted ("; CDI_COMAND is set: did you mean
// CDI_COMMAND?"), or returns "". It reads the whole environment, so it is
// only called on the way to an error.
func (d *Dispatcher) didYouMean(name string) string {
	if d.Environ == nil {
		return ""
	}
	var set []string
	for _, kv := range d.Environ() {
		if k, v, _ := strings.Cut(kv, "="); v != "" {
			set = append(set, k)
		}
	}
	if k, ok := nearmiss.Closest(name, set); ok {
		return fmt.Sprintf("; %s is set: did you mean %s?", k, name)
	}
	return ""
}
