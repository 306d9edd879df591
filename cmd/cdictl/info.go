package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

func infoCommand() *command {
	return &command{name: "info", complete: completeType, args: "[TYPE]", summary: "node capacity per resource-spec, summed over plugins",
		example: "cdictl info\n  cdictl info -o json tty", setup: noFlags((*app).info)}
}

// infoEntry is one plugin's INFO answer.
type infoEntry struct {
	outcome
	caps map[string]int
}

func (a *app) info(args []string) int {
	types, ok := a.typeArg(args)
	if !ok {
		return exitUsage
	}
	confs, err := a.configs(types...)
	if err != nil {
		return a.fail(err)
	}
	out, failed := callEach(a, confs, func(conf caller.Config, e *infoEntry) (err error) {
		e.caps, err = a.caller().Info(a.ctx(), conf)
		return err
	})
	total := map[string]int{}
	for _, conf := range confs {
		total[conf.Type] = 0 // every configured type is reported, even at 0
	}
	sources := map[string][]string{}
	for _, e := range out {
		for k, n := range e.caps {
			total[k] = min(total[k]+n, math.MaxInt32) // a count's most, as a plugin's (a unit of unlimited shares)
			sources[k] = append(sources[k], e.Plugin)
		}
	}
	keys := slices.Sorted(maps.Keys(total))
	fields := []rawjson.Field{{Key: "cdiVersion", Value: protocol.Latest}}
	for _, k := range keys {
		fields = append(fields, rawjson.Field{Key: k, Value: total[k]})
	}
	a.report("RESOURCE\tCAPACITY\tPLUGINS", rowsOf(keys, func(k *string) []string {
		return []string{*k, fmt.Sprint(total[*k]), strings.Join(sources[*k], ",")}
	}), fields...)
	return a.status(failed)
}
