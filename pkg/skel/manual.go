package skel

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/pkg/protocol"
)

// byHand reports whether a person rather than a caller ran the plugin: no
// CDI_COMMAND, and arguments on the command line (callers pass none) or
// stdin on a terminal. The plugin then must not wait for a config that
// nobody is going to send.
func (d *Dispatcher) byHand() bool {
	if d.Getenv(protocol.EnvCommand) != "" {
		return false
	}
	return len(d.Args) > 0 || isTerminal(d.Stdin)
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

// usage is the one line a plugin run by hand prints on stderr.
func usage(about About) string {
	name := about.Name
	if name == "" {
		name = "plugin"
	}
	return fmt.Sprintf("%s: CDI exec plugin that %s; a caller (such as cdictl) runs it with %s=VERSION|INFO|ADD|DEL|GC|DEVICES and its JSON config on stdin\n",
		name, about.Summary, protocol.EnvCommand)
}
