package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cdi-exec/plugins/pkg/abnf"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/invoke"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1 // a plugin failed
	exitUsage  = 2
)

// env is the process state cdictl runs against, injected for tests.
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
}

// app holds the settings shared by every subcommand.
type app struct {
	env
	confDir  string
	path     string
	stateDir string
	timeout  time.Duration
	output   string // "json" or "table"
	flags    *flag.FlagSet
}

type command struct {
	name    string
	args    string
	summary string
	example string
	run     func(a *app, args []string) int
	flags   func(fs *flag.FlagSet) // subcommand flags
}

func commands() []*command {
	return []*command{
		{name: "version", args: "[TYPE]", summary: "negotiate versions with every configured plugin",
			example: "cdictl version\n  cdictl version gpu", run: (*app).version},
		{name: "info", args: "[TYPE]", summary: "node capacity per resource-spec, summed over plugins",
			example: "cdictl info\n  cdictl info -o json tty", run: (*app).info},
		{name: "add", args: "--id ID [--numa N,...] SPEC:N[,SPEC:N...]", summary: "allocate across plugins, all or nothing",
			example: "cdictl add --id pod-1234 gpu:1\n  cdictl add --id pod-1234 --numa 0 gpu:2,tty:1", run: (*app).add,
			flags: func(fs *flag.FlagSet) {
				fs.String("id", "", "request-id to allocate under (required)")
				fs.String("numa", "", "preferred NUMA nodes, comma-separated")
			}},
		{name: "del", args: "--id ID", summary: "free what a request-id holds in every plugin",
			example: "cdictl del --id pod-1234", run: (*app).del,
			flags: func(fs *flag.FlagSet) { fs.String("id", "", "request-id to free (required)") }},
		{name: "devices", args: "[TYPE]", summary: "every device each plugin sees: ids, names, NUMA, usable or why not, holder",
			example: "cdictl devices\n  cdictl devices -o table gpu", run: (*app).devices},
		{name: "ls", args: "", summary: "list every allocation held on the node (read-only)",
			example: "cdictl ls\n  cdictl ls -o json", run: (*app).ls},
		{name: "gc", args: "--valid ID[,ID...] | --valid-file FILE", summary: "free every allocation whose request-id is not valid",
			example: "cdictl gc --valid pod-1,pod-2\n  cdictl gc --valid-file /run/live-pods", run: (*app).gc,
			flags: func(fs *flag.FlagSet) {
				fs.String("valid", "", "request-ids to keep, comma-separated")
				fs.String("valid-file", "", "file of request-ids to keep, one per line or comma-separated")
				fs.Bool("none-valid", false, "keep nothing: free every allocation")
			}},
	}
}

func run(args []string, e env) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(e.stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		a := &app{env: e}
		fs := a.flagSet(c)
		for _, arg := range args[1:] {
			if arg == "-h" || arg == "-help" || arg == "--help" || arg == "--h" {
				fs.SetOutput(e.stdout) // help that was asked for goes to stdout
			}
		}
		rest, err := parse(fs, args[1:])
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		if err != nil {
			return exitUsage
		}
		if a.output != "json" && a.output != "table" {
			fmt.Fprintf(e.stderr, "cdictl %s: -o must be json or table, not %q\n", c.name, a.output)
			return exitUsage
		}
		return c.run(a, rest)
	}
	fmt.Fprintf(e.stderr, "cdictl: unknown command %q\n\n", args[0])
	usage(e.stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: cdictl COMMAND [flags] [args]\n\nThe reference caller of the CDI exec plugins.\n\nCommands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s %s\t%s\n", c.name, c.args, c.summary)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nRun 'cdictl COMMAND --help' for a command's flags and examples.")
	fmt.Fprintln(w, "Environment: CDI_CONF_DIR, CDI_PATH, CDI_STATE_DIR, CDI_LOCK_TIMEOUT, and for plugins CDI_HOST_ROOT.")
}

// flagSet builds a subcommand's flags, with the common ones.
func (a *app) flagSet(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet("cdictl "+c.name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	def := func(name, fallback string) string {
		if v := a.getenv(name); v != "" {
			return v
		}
		return fallback
	}
	fs.StringVar(&a.confDir, "conf-dir", def("CDI_CONF_DIR", protocol.DefaultConfDir), "config directory with <type>.d/*.conf")
	fs.StringVar(&a.path, "path", def("CDI_PATH", protocol.DefaultPath), "plugin search path, colon-separated")
	fs.StringVar(&a.stateDir, "state-dir", def("CDI_STATE_DIR", protocol.DefaultStateDir), "plugin state directory (for ls)")
	fs.DurationVar(&a.timeout, "timeout", invoke.DefaultTimeout, "deadline of each plugin run")
	defOut := "json"
	if isTerminal(a.stdout) {
		defOut = "table"
	}
	fs.StringVar(&a.output, "o", defOut, "output: json (default when piped) or table (default on a terminal)")
	if c.flags != nil {
		c.flags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: cdictl %s %s\n\n%s.\n\nExamples:\n  %s\n\nFlags:\n", c.name, c.args, c.summary, c.example)
		fs.PrintDefaults()
	}
	a.flags = fs
	return fs
}

// parse accepts flags before and after positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return rest, nil
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (a *app) str(name string) string { return a.flags.Lookup(name).Value.String() }

func (a *app) usageErr(format string, args ...any) int {
	fmt.Fprintf(a.stderr, "%s: %s\nRun '%s --help' for usage.\n", a.flags.Name(), fmt.Sprintf(format, args...), a.flags.Name())
	return exitUsage
}

// configs loads the configs of typ ("" for all), reporting unusable files.
func (a *app) configs(typ string) []caller.Config {
	confs, probs := caller.Load(a.confDir)
	for _, p := range probs {
		fmt.Fprintf(a.stderr, "cdictl: skipping %v\n", p)
	}
	return caller.OfType(confs, typ)
}

func (a *app) caller() caller.Caller { return caller.Caller{Path: a.path, Timeout: a.timeout} }

func (a *app) ctx() context.Context { return context.Background() }

// pluginErr reports a plugin failure on stderr, naming config and plugin.
func (a *app) pluginErr(err error) {
	fmt.Fprintf(a.stderr, "cdictl: %v\n", err)
}

// writeFields prints an ordered JSON object.
func (a *app) writeFields(fields []protocol.Field) {
	b, err := protocol.EncodeObject(fields)
	if err != nil {
		fmt.Fprintf(a.stderr, "cdictl: %v\n", err)
		return
	}
	a.stdout.Write(b)
}

func (a *app) table(header string, rows [][]string) {
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// errorJSON is a protocol error as cdictl prints it.
type errorJSON struct {
	Code    int    `json:"code"`
	Msg     string `json:"msg"`
	Details string `json:"details,omitempty"`
	Kind    string `json:"kind,omitempty"` // timeout, crash, garbage, exec
	Stderr  string `json:"stderr,omitempty"`
}

func toErrorJSON(err error) *errorJSON {
	var pe *invoke.Error
	var re *invoke.RunError
	var se *protocol.Error
	switch {
	case errors.As(err, &pe):
		return &errorJSON{Code: pe.Code, Msg: pe.Msg, Details: pe.Details}
	case errors.As(err, &re):
		return &errorJSON{Code: protocol.CodeInternal, Msg: "Plugin gave no answer", Details: re.Kind + ": " + re.Err.Error(), Kind: re.Kind, Stderr: strings.TrimSpace(re.Stderr)}
	case errors.As(err, &se):
		return &errorJSON{Code: se.Code, Msg: se.Msg, Details: se.Details}
	}
	return &errorJSON{Code: protocol.CodeInternal, Msg: "Internal error", Details: err.Error()}
}

// outcome is one plugin's result in a multi-plugin report.
type outcome struct {
	File   string     `json:"file"`
	Type   string     `json:"type"`
	Plugin string     `json:"plugin"`
	Error  *errorJSON `json:"error,omitempty"`
}

func outcomeOf(c caller.Config, err error) outcome {
	o := outcome{File: c.File, Type: c.Type, Plugin: c.Plugin}
	if err != nil {
		o.Error = toErrorJSON(err)
	}
	return o
}

// typeArg returns the optional TYPE argument.
func (a *app) typeArg(args []string) (string, bool) {
	switch len(args) {
	case 0:
		return "", true
	case 1:
		if err := abnf.ValidType(args[0]); err != nil {
			a.usageErr("%v", err)
			return "", false
		}
		return args[0], true
	}
	a.usageErr("takes at most one TYPE")
	return "", false
}

func (a *app) version(args []string) int {
	typ, ok := a.typeArg(args)
	if !ok {
		return exitUsage
	}
	type entry struct {
		outcome
		Supported []string `json:"supportedVersions,omitempty"`
		// Compatible says whether our newest version is among the
		// plugin's; Negotiated is the newest version both support.
		Compatible bool   `json:"compatible"`
		Negotiated string `json:"negotiated,omitempty"`
	}
	var out []entry
	status := exitOK
	c := a.caller()
	for _, conf := range a.configs(typ) {
		e := entry{outcome: outcomeOf(conf, nil)}
		vs, err := c.Versions(a.ctx(), conf)
		if err == nil {
			e.Supported = vs
			e.Compatible = slices.Contains(vs, protocol.Latest)
			e.Negotiated, err = c.Negotiate(a.ctx(), conf)
		}
		if err != nil {
			a.pluginErr(err)
			e.Error = toErrorJSON(err)
			status = exitFailed
		}
		out = append(out, e)
	}
	if a.output == "table" {
		var rows [][]string
		for _, e := range out {
			v := e.Negotiated
			if e.Error != nil {
				v = "error: " + e.Error.Details
			}
			rows = append(rows, []string{e.Type, e.Plugin, e.File, strings.Join(e.Supported, ","), fmt.Sprint(e.Compatible), v})
		}
		a.table("TYPE\tPLUGIN\tCONFIG\tSUPPORTED\tCOMPATIBLE\tNEGOTIATED", rows)
		return status
	}
	a.writeFields([]protocol.Field{{Key: "cdiVersion", Value: protocol.Latest}, {Key: "supportedVersions", Value: protocol.SupportedVersions()}, {Key: "plugins", Value: protocol.NonNil(out)}})
	return status
}

func (a *app) info(args []string) int {
	typ, ok := a.typeArg(args)
	if !ok {
		return exitUsage
	}
	total := map[string]int{}
	sources := map[string][]string{}
	status := exitOK
	confs := a.configs(typ)
	for _, conf := range confs {
		total[conf.Type] += 0 // every configured type is reported, even at 0
		caps, err := a.caller().Info(a.ctx(), conf)
		if err != nil {
			a.pluginErr(err)
			status = exitFailed
			continue
		}
		for k, n := range caps {
			total[k] += n
			sources[k] = append(sources[k], conf.Plugin)
		}
	}
	keys := make([]string, 0, len(total))
	for k := range total {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if a.output == "table" {
		var rows [][]string
		for _, k := range keys {
			rows = append(rows, []string{k, fmt.Sprint(total[k]), strings.Join(sources[k], ",")})
		}
		a.table("RESOURCE\tCAPACITY\tPLUGINS", rows)
		return status
	}
	fields := []protocol.Field{{Key: "cdiVersion", Value: protocol.Latest}}
	for _, k := range keys {
		fields = append(fields, protocol.Field{Key: k, Value: total[k]})
	}
	a.writeFields(fields)
	return status
}

// requestID validates --id.
func (a *app) requestID() (string, bool) {
	id := a.str("id")
	if id == "" {
		a.usageErr("--id is required")
		return "", false
	}
	if err := abnf.ValidRequestID(id); err != nil {
		a.usageErr("--id: %v", err)
		return "", false
	}
	return id, true
}

func (a *app) add(args []string) int {
	id, ok := a.requestID()
	if !ok {
		return exitUsage
	}
	if len(args) != 1 {
		return a.usageErr("want one SPEC:N[,SPEC:N...] argument")
	}
	req, err := abnf.ParseRequest(args[0])
	if err != nil {
		return a.usageErr("%v", err)
	}
	var numa []int
	if s := a.str("numa"); s != "" {
		if numa, err = abnf.ParseNUMA(s); err != nil {
			return a.usageErr("--numa: %v", err)
		}
	}
	added, err := a.caller().AddAll(a.ctx(), a.configs(""), id, req, numa)
	if err != nil {
		a.pluginErr(err)
		e := toErrorJSON(err)
		fields := []protocol.Field{{Key: "cdiVersion", Value: protocol.Latest}, {Key: "code", Value: e.Code}, {Key: "msg", Value: e.Msg}}
		details := e.Details
		var pe *caller.PluginError
		if errors.As(err, &pe) {
			details = strings.TrimSpace(fmt.Sprintf("%s (plugin %s): %s", pe.Config.File, pe.Config.Plugin, details))
		}
		if details != "" {
			fields = append(fields, protocol.Field{Key: "details", Value: details})
		}
		a.writeFields(fields)
		return exitFailed
	}
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
	if a.output == "table" {
		var rows [][]string
		for _, ad := range added {
			rows = append(rows, []string{ad.Config.Type, ad.Config.Plugin, strings.Join(ad.Devices, " ")})
		}
		a.table("TYPE\tPLUGIN\tDEVICES", rows)
		return exitOK
	}
	fields := []protocol.Field{{Key: "cdiVersion", Value: protocol.Latest}, {Key: "devices", Value: devices}}
	if numa != nil {
		fields = append(fields, protocol.Field{Key: "numa_locality", Value: protocol.NonNil(locality)})
	}
	if len(cdiDevices) > 0 {
		fields = append(fields, protocol.Field{Key: "cdiDevices", Value: cdiDevices})
	}
	a.writeFields(fields)
	return exitOK
}

func (a *app) del(args []string) int {
	id, ok := a.requestID()
	if !ok {
		return exitUsage
	}
	if len(args) != 0 {
		return a.usageErr("takes no arguments")
	}
	type entry struct {
		outcome
		Freed bool `json:"freed"`
	}
	var out []entry
	for _, conf := range a.configs("") {
		held, err := a.caller().Del(a.ctx(), conf, id)
		if err != nil {
			a.pluginErr(err)
		}
		out = append(out, entry{outcome: outcomeOf(conf, err), Freed: held})
	}
	if a.output == "table" {
		var rows [][]string
		for _, e := range out {
			res := "nothing held"
			switch {
			case e.Error != nil:
				res = "error: " + e.Error.Msg + " " + e.Error.Details
			case e.Freed:
				res = "freed"
			}
			rows = append(rows, []string{e.Type, e.Plugin, e.File, res})
		}
		a.table("TYPE\tPLUGIN\tCONFIG\tRESULT", rows)
		return exitOK
	}
	a.writeFields([]protocol.Field{{Key: "cdiVersion", Value: protocol.Latest}, {Key: "requestId", Value: id}, {Key: "results", Value: protocol.NonNil(out)}})
	return exitOK
}

func (a *app) gc(args []string) int {
	if len(args) != 0 {
		return a.usageErr("takes no arguments")
	}
	var valid []string
	given := 0
	if s := a.str("valid"); s != "" {
		valid = append(valid, splitIDs(s)...)
		given++
	}
	if f := a.str("valid-file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return a.usageErr("--valid-file: %v", err)
		}
		valid = append(valid, splitIDs(string(b))...)
		given++
	}
	if a.str("none-valid") == "true" {
		given++
	}
	if given == 0 {
		return a.usageErr("give --valid, --valid-file or --none-valid: without a list of live request-ids GC would free everything")
	}
	for _, id := range valid {
		if err := abnf.ValidRequestID(id); err != nil {
			return a.usageErr("%v", err)
		}
	}
	type entry struct {
		outcome
		Freed []string `json:"freed"`
	}
	var out []entry
	for _, conf := range a.configs("") {
		freed, err := a.caller().GC(a.ctx(), conf, valid)
		if err != nil {
			a.pluginErr(err)
		}
		out = append(out, entry{outcome: outcomeOf(conf, err), Freed: protocol.NonNil(freed)})
	}
	if a.output == "table" {
		var rows [][]string
		for _, e := range out {
			res := strings.Join(e.Freed, " ")
			if e.Error != nil {
				res = "error: " + e.Error.Msg + " " + e.Error.Details
			}
			rows = append(rows, []string{e.Type, e.Plugin, e.File, res})
		}
		a.table("TYPE\tPLUGIN\tCONFIG\tFREED", rows)
		return exitOK
	}
	a.writeFields([]protocol.Field{{Key: "cdiVersion", Value: protocol.Latest}, {Key: "results", Value: protocol.NonNil(out)}})
	return exitOK
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
