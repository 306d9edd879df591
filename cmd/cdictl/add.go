package main

import (
	"encoding/json"
	"flag"
	"slices"
	"strings"

	"github.com/cdi-exec/plugins/pkg/abnf"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

func addCommand() *command {
	return &command{name: "add", args: "--id ID [--numa N,...] SPEC:N[,SPEC:N...]", summary: "allocate across plugins, all or nothing",
		example: "cdictl add --id pod-1234 gpu:1\n  cdictl add --id pod-1234 --numa 0 gpu:2,tty:1",
		setup: func(fs *flag.FlagSet) runFunc {
			var f addFlags
			fs.StringVar(&f.id, "id", "", "request-id to allocate under (required)")
			fs.StringVar(&f.numa, "numa", "", "preferred NUMA nodes, comma-separated")
			return f.run
		}}
}

type addFlags struct {
	id   string
	numa string
}

func (f *addFlags) run(a *app, args []string) int {
	id, ok := a.requestID(f.id)
	if !ok {
		return exitUsage
	}
	if err := caller.CheckOwnID(id); err != nil {
		return a.usageErr("--id: %v", err)
	}
	if len(args) != 1 {
		return a.usageErr("want one SPEC:N[,SPEC:N...] argument")
	}
	req, err := abnf.ParseRequest(args[0])
	if err != nil {
		return a.usageErr("%v", err)
	}
	var numa []int
	if f.numa != "" {
		if numa, err = abnf.ParseNUMA(f.numa); err != nil {
			return a.usageErr("--numa: %v", err)
		}
	}
	confs, err := a.configs(requestTypes(req)...)
	if err != nil {
		return a.fail(err)
	}
	added, err := a.caller().AddAll(a.ctx(), confs, id, req, numa)
	if err != nil {
		return a.fail(err)
	}
	a.added(added, numa != nil)
	return exitOK
}

// added prints the merged answer of a successful ADD; numa_locality only
// when locality was asked for.
func (a *app) added(added []*caller.Added, withNUMA bool) {
	devices := []string{}
	var locality []int
	cdiDevices := []string{}
	for _, ad := range added {
		devices = append(devices, ad.Devices...)
		for _, n := range ad.NUMA {
			if !slices.Contains(locality, n) {
				locality = append(locality, n)
			}
		}
		var names []string
		if raw, ok := ad.Extra["cdiDevices"]; ok && json.Unmarshal(raw, &names) == nil {
			cdiDevices = append(cdiDevices, names...)
		}
	}
	slices.Sort(locality)
	fields := []protocol.Field{{Key: "cdiVersion", Value: protocol.Latest}, {Key: "devices", Value: devices}}
	if withNUMA {
		fields = append(fields, protocol.Field{Key: "numa_locality", Value: protocol.NonNil(locality)})
	}
	if len(cdiDevices) > 0 {
		fields = append(fields, protocol.Field{Key: "cdiDevices", Value: cdiDevices})
	}
	a.report("TYPE\tPLUGIN\tDEVICES", rowsOf(added, func(ad **caller.Added) []string {
		return []string{(*ad).Config.Type, (*ad).Config.Plugin, strings.Join((*ad).Devices, " ")}
	}), fields...)
}

// requestTypes returns the resource types a request names, once each.
func requestTypes(req abnf.Request) []string {
	var types []string
	for _, it := range req.Items {
		if !slices.Contains(types, it.Spec.Type) {
			types = append(types, it.Spec.Type)
		}
	}
	return types
}
