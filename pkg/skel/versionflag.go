package skel

import (
	"github.com/cdi-exec/plugins/internal/buildinfo"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// versionFlag answers `<plugin> --version` for people, on stdout, without
// reading stdin or the environment (docs/protocol.md#plugin-command-line).
// It reports whether it did; the VERSION command is separate.
func (d *Dispatcher) versionFlag(about About) bool {
	name := about.Name
	if name == "" {
		name = "plugin"
	}
	return buildinfo.PrintIfAsked(d.Args, d.Stdout, name, protocol.SupportedVersions())
}
