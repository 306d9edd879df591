package main

import (
	"fmt"
	"slices"

	"github.com/spf13/pflag"

	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

func delCommand() *command {
	return &command{name: "del", flagComplete: map[string]completer{"id": completeHeldID}, args: "--id ID", summary: "free what a request-id holds in every plugin",
		example: "cdictl del --id pod-1234",
		setup: func(fs *pflag.FlagSet) runFunc {
			var id string
			fs.StringVar(&id, "id", "", "request-id to free (required)")
			return func(a *app, args []string) int { return a.del(id, args) }
		}}
}

// delEntry is one plugin's DEL outcome; Freed is false without an error
// when the plugin held nothing for the id.
type delEntry struct {
	outcome
	Freed bool `json:"freed"`
}

// del frees id in every plugin. A plugin's DEL always exits 0 (the
// protocol), but del exits 1 when any plugin reported an error, which it
// names; an id that no plugin held is exit 0 with a note on stderr. Each
// config's result says whether the id held its type in its plugin, as
// the stores said before the DELs (holders.answers).
func (a *app) del(id string, args []string) int {
	id, ok := a.requestID(id)
	if !ok {
		return exitUsage
	}
	if len(args) != 0 {
		return a.usageErr("takes no arguments")
	}
	confs, err := a.configs()
	if err != nil {
		return a.fail(err)
	}
	// What id holds, read before the DELs: the first DEL in a plugin frees
	// all of it, so the plugin's answers do not say which config's type
	// it was.
	views, _ := readStoreViews(a.cfg.StateDir, a.cfg.LockTimeout, id)
	h := holders{views: views, confs: confs}
	out, failed := callEach(a, confs, func(conf caller.Config, e *delEntry) (err error) {
		e.Freed, err = a.caller().Del(a.ctx(), conf, id)
		if yes, known := h.answers(conf, id); known && err == nil {
			e.Freed = yes
		}
		return err
	})
	a.report("TYPE\tPLUGIN\t+CONFIG\tRESULT", rowsOf(out, func(e *delEntry) []string {
		res := "nothing held"
		switch {
		case e.Error != nil:
			res = e.Error.String()
		case e.Freed:
			res = "freed"
		}
		return []string{e.Type, e.Plugin, e.File, res}
	}), rawjson.Field{Key: "cdiVersion", Value: protocol.Latest}, rawjson.Field{Key: "requestId", Value: id}, rawjson.Field{Key: "results", Value: out})
	if !failed && !slices.ContainsFunc(out, func(e delEntry) bool { return e.Freed }) {
		fmt.Fprintf(a.stderr, "cdictl: note: no plugin held anything under %s\n", id)
	}
	return a.status(failed)
}
