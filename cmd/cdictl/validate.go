package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/invoke"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

func validateCommand() *command {
	return &command{name: "validate", args: "[--specs [--spec-dir DIR]...]", summary: "check every plugin config, and with --specs the CDI spec files: one line per problem",
		example: "cdictl validate\n  cdictl validate --specs --spec-dir /etc/cdi",
		setup: func(fs *pflag.FlagSet) runFunc {
			var specs bool
			fs.BoolVar(&specs, "specs", false, "also check the CDI spec files of --spec-dir")
			dirs := specDirFlag(fs)
			return func(a *app, args []string) int { return a.validate(specs, a.specDirs(fs, *dirs), args) }
		}}
}

// finding is one problem that validate found.
type finding struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Col     int    `json:"col,omitempty"`
	Msg     string `json:"msg"`
	Warning bool   `json:"warning,omitempty"`
}

func (f *finding) String() string {
	pos := f.File
	if f.Line > 0 {
		pos = fmt.Sprintf("%s:%d:%d", f.File, f.Line, f.Col)
	}
	if f.Warning {
		return pos + ": warning: " + f.Msg
	}
	return pos + ": " + f.Msg
}

// validate checks every config as callers load it (caller.Load: JSON,
// required fields, file names and places, misspelt members), then has each
// usable config's plugin check it by running INFO, which decodes the args
// strictly and reads, never writes. With --specs it checks the CDI spec
// files as the CDI library reads them. Every problem and warning is one
// line ("file:line:col: message"); any is exit 1.
func (a *app) validate(specs bool, dirs []string, args []string) int {
	if len(args) != 0 {
		return a.usageErr("takes no arguments")
	}
	confs, probs := caller.Load(a.cfg.ConfDir)
	out := []finding{}
	for _, p := range probs {
		out = append(out, finding{File: p.File, Line: p.Line, Col: p.Col, Msg: p.Err.Error(), Warning: p.Warning})
	}
	if len(confs) == 0 && len(probs) == 0 {
		out = append(out, finding{File: a.cfg.ConfDir, Msg: "no plugin config (<type>.d/*.conf)"})
	}
	for _, conf := range confs {
		if _, err := a.caller().Info(a.ctx(), conf); err != nil {
			e := toErrorJSON(err)
			f := finding{File: conf.File, Msg: fmt.Sprintf("plugin %s refuses it: %s", conf.Plugin, e)}
			switch {
			case e.Code == protocol.CodeInvalidConfig:
				f.Line, f.Col = caller.ArgsPlace(conf.Raw, e.Details)
			case errors.Is(err, invoke.ErrNotFound): // at the name, with a did-you-mean
				f.Msg = fmt.Sprintf("plugin %s: %s", conf.Plugin, e)
				f.Line, f.Col = caller.Place(conf.Raw, "plugin")
			}
			out = append(out, f)
		}
		out = append(out, a.checkEdits(conf)...)
	}
	if specs {
		_, sp, err := readSpecs(dirs)
		if err != nil {
			return a.fail(protocol.Errorf(protocol.CodeInternal, "reading CDI specs: %w", err))
		}
		for _, p := range sp {
			out = append(out, finding{File: p.File, Msg: p.Error})
		}
	}
	if a.tabular() {
		for i := range out {
			fmt.Fprintln(a.stdout, out[i].String())
		}
	} else {
		a.writeFields([]rawjson.Field{{Key: "cdiVersion", Value: protocol.Latest}, {Key: "problems", Value: out}})
	}
	fmt.Fprintf(a.stderr, "cdictl: %s\n", plural(len(out), "problem")) // "0 problems" too
	return a.status(len(out) > 0)
}

// checkEdits checks a config's cdi_spec container_edits with the CDI
// library's own validation (the plugins apply the same rules without
// linking it: internal/cdispec Edits) and looks up their host paths under
// the host root, where a missing one would keep every ADD from publishing.
func (a *app) checkEdits(conf caller.Config) []finding {
	var c struct {
		Args json.RawMessage `json:"args"`
	}
	if json.Unmarshal(conf.Raw, &c) != nil {
		return nil
	}
	spec, err := cdispec.FromArgs(c.Args)
	if err != nil || spec == nil || spec.ContainerEdits == nil {
		return nil // the plugin's INFO reports a cdi_spec it refuses
	}
	var out []finding
	edits := spec.ContainerEdits.Spec()
	if err := (&cdi.ContainerEdits{ContainerEdits: &edits}).Validate(); err != nil {
		out = append(out, finding{File: conf.File, Msg: "cdi_spec container_edits: " + err.Error()})
	}
	if err := spec.CheckHost(a.cfg.HostRoot); err != nil {
		out = append(out, finding{File: conf.File, Msg: err.Error()})
	}
	if err := spec.CheckHooks(a.cfg.HostRoot); err != nil {
		out = append(out, finding{File: conf.File, Msg: err.Error()})
	}
	return out
}
