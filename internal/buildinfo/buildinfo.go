// Package buildinfo says which build of the suite a binary is: the
// version and commit the Makefile stamps at link time (from git describe),
// or else what the Go toolchain recorded in the binary.
package buildinfo

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at link time by the Makefile:
//
//	-ldflags "-X github.com/cdi-exec/plugins/internal/buildinfo.version=v1.2.3
//	          -X github.com/cdi-exec/plugins/internal/buildinfo.commit=<hash>"
//
// They are never assigned at run time.
var (
	version string
	commit  string
)

// Devel is the version of a build that carries no version information.
const Devel = "(devel)"

// Info identifies a build.
type Info struct {
	Version  string // "v1.2.3", "v0.0.0-42-g43016dd9a1b2-dirty", or Devel
	Commit   string // full commit hash; empty when unknown
	Modified bool   // built from a tree with uncommitted changes
	Go       string // the Go toolchain that built it
}

// Get returns the build information of the running binary.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, bi)
}

// resolve prefers the link-time stamp and falls back to the toolchain's
// build information (module version and VCS settings).
func resolve(version, commit string, bi *debug.BuildInfo) Info {
	info := Info{Version: version, Commit: commit, Go: runtime.Version()}
	if bi != nil {
		info.Go = bi.GoVersion
		if info.Version == "" && bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && info.Commit == "":
				info.Commit = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				info.Modified = true
			}
		}
	}
	if info.Version == "" {
		info.Version = Devel
	}
	if strings.HasSuffix(info.Version, "-dirty") || strings.HasSuffix(info.Version, "+dirty") {
		info.Modified = true
	}
	return info
}

// Write prints the build information of the binary called name, which
// speaks the given protocol versions, as a few "key: value" lines.
func (i Info) Write(w io.Writer, name string, protocols []string) {
	c := i.Commit
	switch {
	case c == "":
		c = "unknown"
	case i.Modified:
		c += " (modified)"
	}
	fmt.Fprintf(w, "%s %s\ncommit: %s\nprotocol: %s\ngo: %s\n",
		name, i.Version, c, strings.Join(protocols, ", "), i.Go)
}

// PrintIfAsked handles a plugin's command line: when args (without the
// program name) are exactly "--version", it writes the build information
// to w and reports true, and the caller exits 0. It never reads stdin or
// the environment, so a person can run it on any node.
func PrintIfAsked(args []string, w io.Writer, name string, protocols []string) bool {
	if len(args) != 1 || args[0] != "--version" {
		return false
	}
	Get().Write(w, name, protocols)
	return true
}
