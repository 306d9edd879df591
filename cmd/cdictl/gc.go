package main

import (
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

func gcCommand() *command {
	return &command{name: "gc", flagComplete: map[string]completer{"valid": completeHeldIDs}, args: "--valid ID[,ID...] | --valid-file FILE | --none-valid [--dry-run] [--include-kubernetes]", summary: "free every allocation whose request-id is not valid, except the Kubernetes modes'",
		example: "cdictl gc --valid pod-1,pod-2\n  cdictl gc --valid-file /run/live-pods\n  cdictl gc --dry-run --none-valid",
		setup: func(fs *pflag.FlagSet) runFunc {
			var f gcFlags
			fs.StringVar(&f.valid, "valid", "", "request-ids to keep, comma-separated")
			fs.StringVar(&f.validFile, "valid-file", "", "file of request-ids to keep, one per line or comma-separated")
			fs.BoolVar(&f.noneValid, "none-valid", false, "keep nothing: free every allocation")
			fs.BoolVar(&f.dryRun, "dry-run", false, "free nothing: list what would be freed, read from the stores")
			fs.BoolVar(&f.includeKubernetes, "include-kubernetes", false, "free also what the Kubernetes modes (cdi-kubelet-plugin) hold")
			return f.run
		},
		exclusive: [][]string{{"valid", "none-valid"}, {"valid-file", "none-valid"}}}
}

type gcFlags struct {
	valid     string
	validFile string
	noneValid bool
	dryRun    bool
	// includeKubernetes frees what the Kubernetes modes hold as well.
	includeKubernetes bool
}

// gcEntry is one plugin's GC outcome.
type gcEntry struct {
	outcome
	Freed []string `json:"freed"`
}

// run collects in every plugin, and exits 1 when any plugin reported an
// error. With --dry-run it runs no plugin: it reads the stores as ls does
// and lists, per config, the request-ids its plugin's store holds that are
// not valid, which is what GC would free.
func (f *gcFlags) run(a *app, args []string) int {
	if len(args) != 0 {
		return a.usageErr("takes no arguments")
	}
	valid, status := f.validIDs(a)
	if status != exitOK {
		return status
	}
	confs, err := a.configs()
	if err != nil {
		return a.fail(err)
	}
	c := a.caller()
	if !f.includeKubernetes {
		// The plugins keep the records the Kubernetes modes made
		// (docs/protocol.md#extension-owners).
		c.Env = append(c.Env, protocol.EnvKeepOwners+"="+protocol.OwnerKubernetes)
	}
	// What the stores hold, read before GC runs: a plugin's first GC frees
	// every id it may, whatever the type, so the plugins' answers do not
	// say which config's type each id held.
	views, viewErr := readStoreViews(a.cfg.StateDir, a.cfg.LockTimeout, "")
	h := holders{views: views, confs: confs}
	collect := func(conf caller.Config) ([]string, error) { return c.GC(a.ctx(), conf, valid) }
	if f.dryRun {
		listed := map[string]bool{} // plugins whose store is listed
		collect = func(conf caller.Config) ([]string, error) {
			if listed[conf.Plugin] { // its first config's GC frees them all
				return nil, nil
			}
			listed[conf.Plugin] = true
			if viewErr != nil {
				return nil, protocol.Errorf(protocol.CodeStore, "%w", viewErr)
			}
			return wouldFree(views, conf.Plugin, valid, f.includeKubernetes)
		}
	}
	out, failed := callEach(a, confs, func(conf caller.Config, e *gcEntry) (err error) {
		e.Freed, err = collect(conf)
		e.Freed = rawjson.NonNil(e.Freed)
		return err
	})
	attributeFreed(h, confs, out)
	head := "TYPE\tPLUGIN\t+CONFIG\tFREED"
	if f.dryRun {
		head = "TYPE\tPLUGIN\t+CONFIG\tWOULD FREE"
	}
	a.report(head, rowsOf(out, func(e *gcEntry) []string {
		res := strings.Join(e.Freed, " ")
		if e.Error != nil {
			res = e.Error.String()
		}
		return []string{e.Type, e.Plugin, e.File, res}
	}), rawjson.Field{Key: "cdiVersion", Value: protocol.Latest}, rawjson.Field{Key: "dryRun", Value: f.dryRun}, rawjson.Field{Key: "results", Value: out})
	return a.status(failed)
}

// wouldFree lists the request-ids in plugin's store, as read, that are
// not valid, and not the Kubernetes modes' unless kube: what its GC would
// free.
func wouldFree(views []storeView, plugin string, valid []string, kube bool) ([]string, error) {
	for _, v := range views {
		if v.Plugin != plugin {
			continue
		}
		if v.Err != nil {
			return nil, protocol.Errorf(protocol.CodeStore, "%w", v.Err)
		}
		var ids []string
		for _, id := range slices.Sorted(maps.Keys(v.Records)) {
			if !slices.Contains(valid, id) && (kube || v.Records[id].Owner != protocol.OwnerKubernetes) {
				ids = append(ids, id)
			}
		}
		return ids, nil
	}
	return nil, nil
}

// attributeFreed lists each id freed in a plugin under the configs whose
// type it held there (holders.answers), rather than under the config
// whose GC happened to free it: the plugin's first. An id the stores said
// nothing about when read stays where the plugin reported it.
func attributeFreed(h holders, confs []caller.Config, out []gcEntry) {
	byPlugin := map[string][]string{}
	for _, e := range out {
		if e.Error == nil {
			for _, id := range e.Freed {
				if !slices.Contains(byPlugin[e.Plugin], id) {
					byPlugin[e.Plugin] = append(byPlugin[e.Plugin], id)
				}
			}
		}
	}
	for i := range out {
		e := &out[i]
		if e.Error != nil {
			continue
		}
		freed := []string{}
		for _, id := range byPlugin[e.Plugin] {
			if yes, known := h.answers(confs[i], id); yes || !known && slices.Contains(e.Freed, id) {
				freed = append(freed, id)
			}
		}
		e.Freed = freed
	}
}

// validIDs returns the request-ids to keep. One of the flags is required:
// without a list of live request-ids GC would free everything.
func (f *gcFlags) validIDs(a *app) ([]string, int) {
	var valid []string
	if f.valid != "" {
		valid = append(valid, splitIDs(f.valid)...)
	}
	if f.validFile != "" {
		b, err := os.ReadFile(f.validFile)
		if err != nil {
			return nil, a.usageErr("--valid-file: %v", err)
		}
		valid = append(valid, splitIDs(string(b))...)
	}
	if f.valid == "" && f.validFile == "" && !f.noneValid {
		return nil, a.usageErr("give --valid, --valid-file or --none-valid: without a list of live request-ids GC would free everything")
	}
	for _, id := range valid {
		if err := request.ValidRequestID(id); err != nil {
			return nil, a.usageErr("%v", err)
		}
	}
	return valid, exitOK
}

// splitIDs splits on commas, white space and newlines, ignoring # comments.
func splitIDs(s string) []string {
	var out []string
	for line := range strings.Lines(s) {
		line, _, _ = strings.Cut(line, "#")
		out = append(out, strings.FieldsFunc(line, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })...)
	}
	return out
}
