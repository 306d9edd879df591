package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

func checkCommand() *command {
	return &command{name: "check", complete: completeStores, args: "[--repair] [STORE...]", summary: "verify the plugins' stores offline: checksums, index, double bookings",
		example: "cdictl check\n  cdictl check --repair /var/lib/cdi/drm.db", empty: "stores",
		setup: func(fs *pflag.FlagSet) runFunc {
			var f checkFlags
			fs.BoolVar(&f.repair, "repair", false, "rebuild a damaged index from the records, when every record is intact")
			return f.run
		}}
}

type checkFlags struct{ repair bool }

// checkEntry is one store's report, or why it could not be checked.
type checkEntry struct {
	store.Report
	Error *errorJSON `json:"error,omitempty"`
}

// run checks the named store files, or every store in the state
// directory. It exits 1 when a store is damaged (and not repaired) or
// could not be checked. It never changes a store unless --repair is given,
// and then only its index (store.CheckFile).
func (f *checkFlags) run(a *app, args []string) int {
	files := args
	if len(files) == 0 {
		var err error
		if files, err = store.Stores(a.cfg.StateDir); err != nil {
			return a.fail(protocol.Errorf(protocol.CodeStore, "%w", err))
		}
	}
	out := []checkEntry{}
	failed := false
	for _, file := range files {
		path, err := filepath.Abs(file)
		e := checkEntry{Report: store.Report{Path: file, Problems: []string{}}}
		if err == nil {
			e.Report, err = store.CheckFile(path, a.cfg.LockTimeout, f.repair)
		}
		if err != nil {
			// The store's errors name its path; the table's cell does
			// not repeat the STORE column.
			fmt.Fprintf(a.stderr, "cdictl: %s\n", withPath(path, err.Error()))
			e.Error = toErrorJSON(protocol.Errorf(protocol.CodeStore, "%w", err))
			e.Error.Details = strings.TrimPrefix(e.Error.Details, path+": ")
		}
		for i, p := range e.Problems {
			e.Problems[i] = strings.TrimPrefix(p, path+": ")
			fmt.Fprintf(a.stderr, "cdictl: %s\n", withPath(path, p))
		}
		failed = failed || err != nil || len(e.Problems) > 0 && !e.Repaired
		out = append(out, e)
	}
	a.report("STORE\tSCHEMA\tRECORDS\tINDEXED\tRESULT", rowsOf(out, checkRow),
		rawjson.Field{Key: "cdiVersion", Value: protocol.Latest}, rawjson.Field{Key: "stores", Value: out})
	return a.status(failed)
}

func checkRow(e *checkEntry) []string {
	res := "sound"
	switch {
	case e.Error != nil:
		res = e.Error.String()
	case e.Repaired:
		res = fmt.Sprintf("index rebuilt (%s found)", plural(len(e.Problems), "problem"))
	case len(e.Problems) > 0 && e.Repairable:
		res = fmt.Sprintf("damaged index, repairable: %s", strings.Join(e.Problems, "; "))
	case len(e.Problems) > 0:
		res = "damaged: " + strings.Join(e.Problems, "; ")
	}
	return []string{e.Path, fmt.Sprint(e.Schema), fmt.Sprint(e.Records), fmt.Sprint(e.Devices), res}
}

// withPath is msg about the file path, which it names once.
func withPath(path, msg string) string {
	if strings.HasPrefix(msg, path+": ") {
		return msg
	}
	return path + ": " + msg
}
