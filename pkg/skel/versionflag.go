package skel

import (
	"os"
	"path/filepath"

	"github.com/cdi-exec/plugins/pkg/buildinfo"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// versionFlag answers `<plugin> --version` for people, on stderr, without
// reading stdin or the environment (docs/protocol.md#plugin-command-line).
// It reports whether it did; the VERSION command is separate.
func versionFlag() bool {
	return buildinfo.PrintIfAsked(os.Args[1:], os.Stderr, filepath.Base(os.Args[0]), protocol.SupportedVersions())
}
