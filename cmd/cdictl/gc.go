package main

import (
	"flag"
	"os"
	"strings"

	"github.com/cdi-exec/plugins/pkg/abnf"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

func gcCommand() *command {
	return &command{name: "gc", args: "--valid ID[,ID...] | --valid-file FILE | --none-valid", summary: "free every allocation whose request-id is not valid",
		example: "cdictl gc --valid pod-1,pod-2\n  cdictl gc --valid-file /run/live-pods",
		setup: func(fs *flag.FlagSet) runFunc {
			var f gcFlags
			fs.StringVar(&f.valid, "valid", "", "request-ids to keep, comma-separated")
			fs.StringVar(&f.validFile, "valid-file", "", "file of request-ids to keep, one per line or comma-separated")
			fs.BoolVar(&f.noneValid, "none-valid", false, "keep nothing: free every allocation")
			return f.run
		}}
}

type gcFlags struct {
	valid     string
	validFile string
	noneValid bool
}

// gcEntry is one plugin's GC outcome.
type gcEntry struct {
	outcome
	Freed []string `json:"freed"`
}

// run collects in every plugin. It exits 0 whatever the plugins answer:
// their outcomes are in the output.
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
	out, _ := callEach(a, confs, func(conf caller.Config, e *gcEntry) (err error) {
		e.Freed, err = a.caller().GC(a.ctx(), conf, valid)
		e.Freed = protocol.NonNil(e.Freed)
		return err
	})
	a.report("TYPE\tPLUGIN\tCONFIG\tFREED", rowsOf(out, func(e *gcEntry) []string {
		res := strings.Join(e.Freed, " ")
		if e.Error != nil {
			res = e.Error.String()
		}
		return []string{e.Type, e.Plugin, e.File, res}
	}), protocol.Field{Key: "cdiVersion", Value: protocol.Latest}, protocol.Field{Key: "results", Value: out})
	return exitOK
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
		if err := abnf.ValidRequestID(id); err != nil {
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
