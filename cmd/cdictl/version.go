package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

func versionCommand() *command {
	return &command{name: "version", complete: completeType, args: "[TYPE] | --client", summary: "negotiate versions with every configured plugin",
		example: "cdictl version\n  cdictl version gpu\n  cdictl version --client", setup: versionFlags}
}

// versionEntry is one plugin's row of `cdictl version`.
type versionEntry struct {
	outcome
	Supported []string `json:"supportedVersions,omitempty"`
	// Compatible says whether our newest version is among the plugin's;
	// Negotiated is the newest version both support.
	Compatible bool   `json:"compatible"`
	Negotiated string `json:"negotiated,omitempty"`
}

func (a *app) version(args []string) int {
	types, ok := a.typeArg(args)
	if !ok {
		return exitUsage
	}
	confs, err := a.configs(types...)
	if err != nil {
		return a.fail(err)
	}
	c := a.caller()
	out, failed := callEach(a, confs, func(conf caller.Config, e *versionEntry) error {
		vs, err := c.Versions(a.ctx(), conf)
		if err != nil {
			return err
		}
		e.Supported = vs
		e.Compatible = slices.Contains(vs, protocol.Latest)
		e.Negotiated, err = c.Negotiate(a.ctx(), conf)
		return err
	})
	a.report("TYPE\tPLUGIN\t+CONFIG\tSUPPORTED\tCOMPATIBLE\tNEGOTIATED", rowsOf(out, func(e *versionEntry) []string {
		v := e.Negotiated
		if e.Error != nil {
			v = "error: " + e.Error.Details
		}
		return []string{e.Type, e.Plugin, e.File, strings.Join(e.Supported, ","), fmt.Sprint(e.Compatible), v}
	}), rawjson.Field{Key: "cdiVersion", Value: protocol.Latest}, rawjson.Field{Key: "supportedVersions", Value: protocol.SupportedVersions()},
		rawjson.Field{Key: "plugins", Value: out})
	return a.status(failed)
}
