package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

func addCommand() *command {
	return &command{name: "add", complete: completeSpecs, args: "--id ID [--numa N,...] SPEC:N[,SPEC:N...]", summary: "allocate across plugins, all or nothing",
		example: "cdictl add --id pod-1234 gpu:1\n  cdictl add --id pod-1234 --numa 0 gpu:2,tty:1",
		setup: func(fs *pflag.FlagSet) runFunc {
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
	req, err := request.Parse(args[0])
	if err != nil {
		return a.usageErr("%v", err)
	}
	var numa []int
	if f.numa != "" {
		if numa, err = request.ParseNUMA(f.numa); err != nil {
			return a.usageErr("--numa: %v", err)
		}
	}
	confs, err := a.configs(requestTypes(req)...)
	if err != nil {
		return a.fail(err)
	}
	for _, p := range a.broken {
		// A config of a requested type that cannot be used may be the
		// one meant to serve it: allocate nothing until it is fixed.
		if typ := folderType(p.File); slices.Contains(requestTypes(req), typ) {
			return a.fail(protocol.NewError(protocol.CodeInvalidConfig, fmt.Sprintf("config %s of type %s cannot be used: %v; fix it or move it away, then add again", p.File, typ, p.Err)))
		}
	}
	held, err := heldBy(a.cfg.StateDir, a.cfg.LockTimeout, id)
	if err != nil {
		return a.fail(protocol.Errorf(protocol.CodeStore, "%w", err))
	}
	added, err := addAll(a.ctx(), a.caller(), confs, id, req, numa, held)
	var rb *rollbackError
	if errors.As(err, &rb) {
		for _, c := range rb.Freed {
			fmt.Fprintf(a.stderr, "cdictl: rolled back: freed what this call added under %s in %s (%s)\n", id, c.Plugin, c.File)
		}
		for _, c := range rb.Kept {
			fmt.Fprintf(a.stderr, "cdictl: kept: %s already held this in %s (%s) before the call\n", id, c.Plugin, c.File)
		}
	}
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
	keyDevices := map[string]string{}
	for _, ad := range added {
		devices = append(devices, ad.Devices...)
		for _, n := range ad.NUMA {
			if !slices.Contains(locality, n) {
				locality = append(locality, n)
			}
		}
		cdiDevices = append(cdiDevices, ad.CDIDevices...)
		maps.Copy(keyDevices, ad.CDIKeyDevices)
	}
	slices.Sort(locality)
	fields := []rawjson.Field{{Key: "cdiVersion", Value: protocol.Latest}, {Key: "devices", Value: devices}}
	if withNUMA {
		fields = append(fields, rawjson.Field{Key: "numa_locality", Value: rawjson.NonNil(locality)})
	}
	if len(cdiDevices) > 0 {
		fields = append(fields, rawjson.Field{Key: "cdiDevices", Value: cdiDevices})
	}
	if len(keyDevices) > 0 {
		// Each device's own CDI device, by device key
		// (docs/cdi-bridge.md): what a caller injects for one device.
		fields = append(fields, rawjson.Field{Key: "cdiKeyDevices", Value: keyDevices})
	}
	a.report("TYPE\tPLUGIN\tDEVICES", rowsOf(added, func(ad **caller.Added) []string {
		return []string{(*ad).Config.Type, (*ad).Config.Plugin, strings.Join((*ad).Devices, " ")}
	}), fields...)
}

// requestTypes returns the resource types a request names, once each.
func requestTypes(req request.Request) []string {
	var types []string
	for _, it := range req.Items {
		if !slices.Contains(types, it.Spec.Type) {
			types = append(types, it.Spec.Type)
		}
	}
	return types
}
