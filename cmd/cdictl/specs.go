package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/spf13/pflag"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

func specsCommand() *command {
	return &command{name: "specs", args: "[--spec-dir DIR]... | --restore", summary: "the CDI device names the node's CDI spec files define; --restore writes back missing ones",
		example:   "cdictl specs -o table\n  cdictl specs --spec-dir /var/run/cdi\n  cdictl specs --restore",
		exclusive: [][]string{{"spec-dir", "restore"}}, empty: "CDI devices",
		setup: func(fs *pflag.FlagSet) runFunc {
			dirs := specDirFlag(fs)
			restore := fs.Bool("restore", false, "write back the spec file of every allocation in the plugins' stores whose file is missing (a pinned replay ADD of each), and list them")
			return func(a *app, args []string) int {
				if *restore {
					return a.restoreSpecs(args)
				}
				return a.specs(a.specDirs(fs, *dirs), args)
			}
		}}
}

// specDirFlag adds --spec-dir, the CDI spec directories, to fs.
func specDirFlag(fs *pflag.FlagSet) *[]string {
	return fs.StringSlice("spec-dir", slices.Clone(cdi.DefaultSpecDirs), "CDI spec `DIR`, repeatable (default: the CDI library's, /etc/cdi and /var/run/cdi, and every cdi_spec dir of the configs)")
}

// specDirs is --spec-dir when given; else the CDI library's directories
// and, after them, the cdi_spec dir of every config that has one (its
// delegate's too), where the plugins write their specs.
func (a *app) specDirs(fs *pflag.FlagSet, dirs []string) []string {
	if fs.Changed("spec-dir") {
		return dirs
	}
	confs, _ := caller.Load(a.cfg.ConfDir)
	for _, c := range confs {
		for _, args := range configArgs(c.Raw) {
			if spec, err := cdispec.FromArgs(args); err == nil && spec != nil && !slices.Contains(dirs, spec.Dir) {
				dirs = append(dirs, spec.Dir)
			}
		}
	}
	return dirs
}

// configArgs returns a config's args and, when it chains a delegate,
// the delegate's args.
func configArgs(raw []byte) []json.RawMessage {
	var c struct {
		Args json.RawMessage `json:"args"`
	}
	if json.Unmarshal(raw, &c) != nil || len(c.Args) == 0 {
		return nil
	}
	out := []json.RawMessage{c.Args}
	var d struct {
		Delegate *struct {
			Args json.RawMessage `json:"args"`
		} `json:"delegate"`
	}
	if json.Unmarshal(c.Args, &d) == nil && d.Delegate != nil && len(d.Delegate.Args) > 0 {
		out = append(out, d.Delegate.Args)
	}
	return out
}

// specDevice is one device of `cdictl specs`.
type specDevice struct {
	Name string `json:"name"` // fully qualified: vendor/class=name
	Spec string `json:"spec"` // the file that defines it
}

// specProblem is a spec file or directory that could not be used.
type specProblem struct {
	File  string `json:"file"`
	Error string `json:"error"`
}

// readSpecs reads the CDI spec files of dirs as the CDI library does
// (its cache, without watching), and returns the devices they define and
// their problems, each sorted.
func readSpecs(dirs []string) ([]specDevice, []specProblem, error) {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil && cache == nil {
		return nil, nil, err
	}
	devs := []specDevice{}
	for _, name := range cache.ListDevices() {
		devs = append(devs, specDevice{Name: name, Spec: cache.GetDevice(name).GetSpec().GetPath()})
	}
	var probs []specProblem
	errs := cache.GetErrors()
	for _, file := range slices.Sorted(maps.Keys(errs)) {
		for _, e := range errs[file] {
			probs = append(probs, specProblem{File: file, Error: e.Error()})
		}
	}
	return devs, probs, nil
}

// specs lists the CDI device names the spec files define. A file that
// cannot be used is reported on stderr and under errors, and exits 1.
func (a *app) specs(dirs []string, args []string) int {
	if len(args) != 0 {
		return a.usageErr("takes no arguments")
	}
	devs, probs, err := readSpecs(dirs)
	if err != nil {
		return a.fail(protocol.Errorf(protocol.CodeInternal, "reading CDI specs: %w", err))
	}
	for _, p := range probs {
		fmt.Fprintf(a.stderr, "cdictl: %s: %s\n", p.File, p.Error)
	}
	fields := []rawjson.Field{{Key: "cdiVersion", Value: protocol.Latest}, {Key: "devices", Value: devs}}
	if len(probs) > 0 {
		fields = append(fields, rawjson.Field{Key: "errors", Value: probs})
	}
	a.report("NAME\tSPEC", rowsOf(devs, func(d *specDevice) []string { return []string{d.Name, d.Spec} }), fields...)
	return a.status(len(probs) > 0)
}
