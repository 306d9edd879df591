package main

import (
	"io"

	"github.com/spf13/pflag"

	"github.com/cdi-exec/plugins/internal/buildinfo"
	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// versionFlags adds --client to `cdictl version`: cdictl's own build,
// without running any plugin.
func versionFlags(fs *pflag.FlagSet) runFunc {
	client := fs.Bool("client", false, "show only cdictl's own version, commit and protocol versions; run no plugin")
	return func(a *app, args []string) int {
		if *client {
			return a.client(args)
		}
		return a.version(args)
	}
}

// printVersion writes cdictl's build information as text, for
// `cdictl --version`.
func printVersion(w io.Writer) int {
	buildinfo.Get().Write(w, "cdictl", protocol.SupportedVersions())
	return exitOK
}

// client answers `cdictl version --client`: as text with -o table or wide, else
// {"cdiVersion", "supportedVersions", "client": {"version", "commit",
// "modified", "go"}}.
func (a *app) client(args []string) int {
	if len(args) != 0 {
		return a.usageErr("--client takes no TYPE")
	}
	if a.tabular() {
		return printVersion(a.stdout)
	}
	i := buildinfo.Get()
	a.writeFields([]rawjson.Field{
		{Key: "cdiVersion", Value: protocol.Latest},
		{Key: "supportedVersions", Value: protocol.SupportedVersions()},
		{Key: "client", Value: struct {
			Version  string `json:"version"`
			Commit   string `json:"commit"`
			Modified bool   `json:"modified"`
			Go       string `json:"go"`
		}{i.Version, i.Commit, i.Modified, i.Go}},
	})
	return exitOK
}
