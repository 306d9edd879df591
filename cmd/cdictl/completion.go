package main

import (
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/caller"
)

// What the shell completes besides commands and flags: the values of -o,
// the node's resource types (TYPE arguments, add's SPEC:N list), the
// request-ids held in its stores (--id of del, gc's --valid list) and its
// store files (check's STORE arguments). Each reads the node as the
// command would, with the flags given so far (--conf-dir, --state-dir),
// and never runs a plugin.

// completer completes a positional argument or a flag's value.
type completer func(a *app, args []string, toComplete string) ([]string, cobra.ShellCompDirective)

// outputFormats are the values of -o.
func outputFormats() []string { return []string{"json", "yaml", "table", "wide"} }

// completeOutput completes -o.
func completeOutput(_ *app, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	return outputFormats(), cobra.ShellCompDirectiveNoFileComp
}

// nodeTypes lists the resource types of the usable configs, sorted.
func (a *app) nodeTypes() []string {
	confs, _ := caller.Load(a.cfg.ConfDir)
	var types []string
	for _, c := range confs {
		if !slices.Contains(types, c.Type) {
			types = append(types, c.Type)
		}
	}
	slices.Sort(types)
	return types
}

// completeType completes the one optional TYPE argument.
func completeType(a *app, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.nodeTypes(), cobra.ShellCompDirectiveNoFileComp
}

// completeSpecs completes add's SPEC:N[,SPEC:N...]: after the last comma,
// each type followed by a colon, for the amount to be typed.
func completeSpecs(a *app, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	done := toComplete[:strings.LastIndex(toComplete, ",")+1]
	if strings.Contains(toComplete[len(done):], ":") {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, t := range a.nodeTypes() {
		out = append(out, done+t+":")
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

// heldIDs lists the request-ids the node's stores hold, sorted; waiting
// briefly for a store's lock, since a shell is waiting.
func (a *app) heldIDs() []string {
	rows, _ := readStores(a.cfg.StateDir, 500*time.Millisecond, nil)
	var ids []string
	for _, r := range rows {
		if !slices.Contains(ids, r.RequestID) {
			ids = append(ids, r.RequestID)
		}
	}
	slices.Sort(ids)
	return ids
}

// completeHeldID completes a request-id flag (del --id).
func completeHeldID(a *app, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	return a.heldIDs(), cobra.ShellCompDirectiveNoFileComp
}

// completeHeldIDs completes a comma-separated list of request-ids (gc
// --valid): after the last comma, each held id not listed yet.
func completeHeldIDs(a *app, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	done := toComplete[:strings.LastIndex(toComplete, ",")+1]
	given := strings.Split(done, ",")
	var out []string
	for _, id := range a.heldIDs() {
		if !slices.Contains(given, id) {
			out = append(out, done+id)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

// completeStores completes check's STORE arguments: the store files of
// the state directory not given yet.
func completeStores(a *app, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	files, err := store.Stores(a.cfg.StateDir)
	if err != nil {
		return nil, cobra.ShellCompDirectiveDefault
	}
	var out []string
	for _, f := range files {
		if !slices.Contains(args, f) {
			out = append(out, f)
		}
	}
	return out, cobra.ShellCompDirectiveDefault
}

// completions registers the shell completions of the command c on cc.
func (a *app) completions(cc *cobra.Command, c *command) {
	cc.ValidArgsFunction = cobra.NoFileCompletions
	if c.complete != nil {
		cc.ValidArgsFunction = func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			return c.complete(a, args, toComplete)
		}
	}
	register := func(flag string, f completer) {
		// Only fails for a flag that does not exist or has one already.
		_ = cc.RegisterFlagCompletionFunc(flag, func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			return f(a, args, toComplete)
		})
	}
	register("output", completeOutput)
	for flag, f := range c.flagComplete {
		register(flag, f)
	}
}
