package main

import (
	"fmt"
	"maps"
	"slices"

	"github.com/spf13/pflag"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

func specsCommand() *command {
	return &command{name: "specs", args: "[--spec-dir DIR]...", summary: "the CDI device names the node's CDI spec files define",
		example: "cdictl specs -o table\n  cdictl specs --spec-dir /var/run/cdi",
		setup: func(fs *pflag.FlagSet) runFunc {
			dirs := specDirFlag(fs)
			return func(a *app, args []string) int { return a.specs(*dirs, args) }
		}}
}

// specDirFlag adds --spec-dir, the CDI spec directories, to fs.
func specDirFlag(fs *pflag.FlagSet) *[]string {
	return fs.StringSlice("spec-dir", slices.Clone(cdi.DefaultSpecDirs), "CDI spec `DIR`, repeatable (default: the CDI library's, /etc/cdi and /var/run/cdi)")
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
