package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"

	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/invoke"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// report prints a command's result as -o asks: a table with header and
// the rows that rows returns (header columns marked with a leading "+"
// only with -o wide), or fields as one JSON or YAML object. A table
// without rows is said so instead, as kubectl says it, on stderr: "No
// devices found" (command.empty).
func (a *app) report(header string, rows func() [][]string, fields ...rawjson.Field) {
	if a.tabular() {
		r := rows()
		if len(r) == 0 && a.empty != "" {
			fmt.Fprintf(a.stderr, "No %s found\n", a.empty)
			return
		}
		a.table(header, r)
		return
	}
	a.writeFields(fields)
}

// tabular reports whether -o asks for a table (table or wide) rather
// than an object (json or yaml).
func (a *app) tabular() bool { return a.output == "table" || a.output == "wide" }

// writeFields prints fields as one object: JSON, or YAML with -o yaml.
func (a *app) writeFields(fields []rawjson.Field) {
	b, err := encodeJSON(fields)
	if err == nil && a.output == "yaml" {
		b, err = toYAML(b)
	}
	if err != nil {
		fmt.Fprintf(a.stderr, "cdictl: %v\n", err)
		return
	}
	a.stdout.Write(b)
}

// toYAML turns a JSON document into YAML, block style, keeping the order
// of members.
func toYAML(j []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(j, &doc); err != nil { // JSON is YAML
		return nil, err
	}
	var block func(n *yaml.Node)
	block = func(n *yaml.Node) {
		n.Style = 0
		for _, c := range n.Content {
			block(c)
		}
	}
	block(&doc)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

// encodeJSON encodes an ordered JSON object, two-space indented, members
// in the given order. This is the one place cdictl encodes JSON: strings
// keep <, > and & as they are (no \u003c), since the output is read by
// people and by JSON parsers, never embedded in HTML.
func encodeJSON(fields []rawjson.Field) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("  ", "  ")
	b.WriteString("{\n")
	for i, f := range fields {
		b.WriteString("  ")
		if err := enc.Encode(f.Key); err != nil {
			return nil, err
		}
		b.Truncate(b.Len() - 1) // Encode ends each value with a newline
		b.WriteString(": ")
		if err := enc.Encode(f.Value); err != nil {
			return nil, err
		}
		if i < len(fields)-1 {
			b.Truncate(b.Len() - 1)
			b.WriteString(",\n")
		}
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// fail reports a failure that ends the command: on stderr, and on stdout as
// one protocol error object (JSON and YAML output only). For a plugin's failure the
// details name its config file and plugin. It returns exitFailed.
func (a *app) fail(err error) int {
	fmt.Fprintf(a.stderr, "cdictl: %v\n", err)
	if a.tabular() {
		return exitFailed
	}
	e := toErrorJSON(err)
	fields := []rawjson.Field{{Key: "cdiVersion", Value: protocol.Latest}, {Key: "code", Value: e.Code}, {Key: "msg", Value: e.Msg}}
	details := e.Details
	var pe *caller.PluginError
	if errors.As(err, &pe) {
		details = strings.TrimSpace(fmt.Sprintf("%s (plugin %s): %s", pe.Config.File, pe.Config.Plugin, details))
	}
	if details != "" {
		fields = append(fields, rawjson.Field{Key: "details", Value: details})
	}
	a.writeFields(fields)
	return exitFailed
}

// table prints rows under header, tab-separated columns aligned. A
// header column marked with a leading "+" is shown only with -o wide; an
// empty cell is shown as "-".
func (a *app) table(header string, rows [][]string) {
	cols := strings.Split(header, "\t")
	show := make([]bool, len(cols))
	var head []string
	for i, c := range cols {
		name, wide := strings.CutPrefix(c, "+")
		if show[i] = !wide || a.output == "wide"; show[i] {
			head = append(head, name)
		}
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	if !a.noHeaders {
		fmt.Fprintln(tw, strings.Join(head, "\t"))
	}
	for _, r := range rows {
		var cells []string
		for i, c := range r {
			if i < len(show) && !show[i] {
				continue
			}
			cells = append(cells, orDash(c))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
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
	case errors.As(err, &re) && errors.Is(re.Err, invoke.ErrNotFound):
		// The flag's hint goes before a did-you-mean, which ends it.
		msg, near, hasNear := strings.Cut(re.Err.Error(), "; did you mean ")
		details := msg + "; --path overrides " + protocol.EnvPath
		if hasNear {
			details += "; did you mean " + near
		}
		return &errorJSON{Code: protocol.CodeInternal, Msg: "Plugin binary not found", Details: details, Kind: re.Kind}
	case errors.As(err, &re):
		return &errorJSON{Code: protocol.CodeInternal, Msg: "Plugin gave no answer", Details: re.Kind + ": " + re.Err.Error(), Kind: re.Kind, Stderr: strings.TrimSpace(re.Stderr)}
	case errors.As(err, &se):
		return &errorJSON{Code: se.Code, Msg: se.Msg, Details: se.Details}
	}
	return &errorJSON{Code: protocol.CodeInternal, Msg: "Internal error", Details: err.Error()}
}

// String is the error as a table cell: "error: <msg>: <details>".
func (e *errorJSON) String() string {
	if e.Details == "" {
		return "error: " + e.Msg
	}
	return "error: " + e.Msg + ": " + e.Details
}

// outcome is one plugin's result in a multi-plugin report. The entries of
// every such report embed it.
type outcome struct {
	File   string     `json:"file"`
	Type   string     `json:"type"`
	Plugin string     `json:"plugin"`
	Error  *errorJSON `json:"error,omitempty"`
}

func (o *outcome) head() *outcome { return o }

// entry is a pointer to a report entry E that embeds outcome.
type entry[E any] interface {
	*E
	head() *outcome
}

// callEach calls fn for every config, in order, and returns one entry per
// config with its outcome filled in. A call that fails is reported on
// stderr and recorded in its entry's error; failed says whether any did.
func callEach[E any, P entry[E]](a *app, confs []caller.Config, fn func(conf caller.Config, e P) error) (out []E, failed bool) {
	out = make([]E, len(confs))
	for i, conf := range confs {
		e := P(&out[i])
		*e.head() = outcome{File: conf.File, Type: conf.Type, Plugin: conf.Plugin}
		if err := fn(conf, e); err != nil {
			fmt.Fprintf(a.stderr, "cdictl: %v\n", err)
			e.head().Error = toErrorJSON(err)
			failed = true
		}
	}
	return out, failed
}

// rowsOf returns a table row per entry.
func rowsOf[E any](out []E, row func(e *E) []string) func() [][]string {
	return func() [][]string {
		rows := make([][]string, 0, len(out))
		for i := range out {
			rows = append(rows, row(&out[i]))
		}
		return rows
	}
}

// status is exitFailed when failed or when a config file could not be
// used, else exitOK.
func (a *app) status(failed bool) int {
	if failed || a.configFailed {
		return exitFailed
	}
	return exitOK
}

// orDash is s, or "-" for an empty table cell.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// plural is n and the noun, with an s unless n is 1: "1 problem", "2
// problems".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
