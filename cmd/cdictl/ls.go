package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

func lsCommand() *command {
	return &command{name: "ls", args: "", summary: "list every allocation held on the node (read-only)",
		example: "cdictl ls\n  cdictl ls -o json", setup: noFlags((*app).ls), empty: "allocations"}
}

// allocation is one row of `cdictl ls`.
type allocation struct {
	RequestID  string   `json:"requestId"`
	Plugin     string   `json:"plugin"`
	Type       string   `json:"type"`
	Spec       string   `json:"spec"`
	Amount     int      `json:"amount"`
	Devices    []string `json:"devices"`
	DeviceKeys []string `json:"deviceKeys"`
	NUMA       []int    `json:"numa"`
	// CDIDevices are the qualified CDI device names published for the
	// request-id under the cdi_spec of its configs (docs/cdi-bridge.md).
	CDIDevices []string  `json:"cdiDevices"`
	Created    time.Time `json:"created"`
	AgeSeconds int64     `json:"ageSeconds"`
	// Delegate names the plugin this allocation chain-loaded (sriov's
	// delegate); DelegateOf, on the delegate's own row of the same
	// request-id and type, the plugin that chain-loaded it. Both rows
	// list the same devices.
	Delegate   string `json:"delegate,omitempty"`
	DelegateOf string `json:"delegateOf,omitempty"`
	// Owner is who made the allocation (its record's owner:
	// "kubernetes" for the Kubernetes modes); absent for a caller that
	// named none and for records made before owners were kept.
	Owner string `json:"owner,omitempty"`
}

// storeError is a store that could not be read.
type storeError struct {
	Store string `json:"store"`
	*errorJSON
}

// ls reads every plugin store in the state directory through the store's
// read-only API: a shared lock for one read transaction, with the bounded
// wait of CDI_LOCK_TIMEOUT, so it never blocks plugins for long and never
// changes anything. A state directory or store it cannot read is an error
// (code 106, exit 1); what it could read is still listed.
func (a *app) ls(args []string) int {
	if len(args) != 0 {
		return a.usageErr("takes no arguments")
	}
	rows, errs := readStores(a.cfg.StateDir, a.cfg.LockTimeout, publishers(a.load()))
	for _, e := range errs {
		fmt.Fprintf(a.stderr, "cdictl: %s (code %d)\n", e.Details, e.Code)
	}
	fields := []rawjson.Field{{Key: "cdiVersion", Value: protocol.Latest}, {Key: "allocations", Value: rows}}
	if len(errs) > 0 {
		fields = append(fields, rawjson.Field{Key: "errors", Value: errs})
	}
	a.report("REQUEST-ID\tPLUGIN\tREQUEST\tDEVICES\tCDI-DEVICES\tNUMA\tAGE\tOWNER\t+DEVICE-KEYS\t+CREATED", rowsOf(rows, func(r *allocation) []string {
		plugin := r.Plugin
		if r.DelegateOf != "" {
			plugin += " (delegate of " + r.DelegateOf + ")"
		}
		owner := r.Owner
		if owner == "" {
			owner = "-"
		}
		return []string{r.RequestID, plugin, fmt.Sprintf("%s:%d", r.Spec, r.Amount), strings.Join(r.Devices, " "),
			strings.Join(r.CDIDevices, " "), strings.Trim(strings.ReplaceAll(fmt.Sprint(r.NUMA), " ", ","), "[]"),
			(time.Duration(r.AgeSeconds) * time.Second).String(), owner, strings.Join(r.DeviceKeys, " "), r.Created.Format(time.RFC3339)}
	}), fields...)
	return a.status(len(errs) > 0)
}

// readStores lists the allocations of every store in stateDir, sorted by
// store file, then request-id, and the stores that could not be read.
// Each row is named by its allocation's own type and delegate (held.go).
func readStores(stateDir string, timeout time.Duration, pub publisherSet) ([]allocation, []storeError) {
	views, err := readStoreViews(stateDir, timeout, "")
	if err != nil {
		return []allocation{}, []storeError{{Store: stateDir, errorJSON: toErrorJSON(protocol.Errorf(protocol.CodeStore, "%w", err))}}
	}
	h := holders{views: views}
	now := time.Now()
	rows := []allocation{}
	var errs []storeError
	for _, v := range views {
		if v.Err != nil {
			errs = append(errs, storeError{Store: v.File, errorJSON: toErrorJSON(protocol.Errorf(protocol.CodeStore, "%w", v.Err))})
			continue
		}
		owner := cdispec.Owner{Plugin: v.Plugin, Store: v.StoreID}
		for _, id := range slices.Sorted(maps.Keys(v.Records)) {
			rows = append(rows, recordRows(h, v.Records[id], owner, pub, now)...)
		}
	}
	return rows, errs
}

// recordRows turns a record of owner's store into one row per allocation.
func recordRows(h holders, r *store.Record, owner cdispec.Owner, pub publisherSet, now time.Time) []allocation {
	var rows []allocation
	for _, al := range r.Allocations {
		typ := al.Type()
		row := allocation{RequestID: r.ID, Plugin: owner.Plugin, Type: typ, Spec: al.Spec, Amount: al.Amount,
			Devices: rawjson.NonNil(al.HandedOut()), DeviceKeys: []string{}, NUMA: []int{}, CDIDevices: rawjson.NonNil(pub.names(owner, r.ID, typ)),
			Created: al.Created, AgeSeconds: int64(now.Sub(al.Created).Seconds()), Delegate: al.Delegate,
			DelegateOf: h.delegateOf(owner.Plugin, r.ID, typ), Owner: r.Owner}
		for _, d := range al.Devices {
			row.DeviceKeys = append(row.DeviceKeys, d.Key)
			if d.NUMA >= 0 && !slices.Contains(row.NUMA, d.NUMA) {
				row.NUMA = append(row.NUMA, d.NUMA)
			}
		}
		slices.Sort(row.NUMA)
		rows = append(rows, row)
	}
	return rows
}

// publisherSet holds the cdi_spec of each config, keyed by plugin and type:
// the configs whose allocations land in one store record.
type publisherSet map[[2]string][]*cdispec.Config

func publishers(confs []caller.Config) publisherSet {
	pub := publisherSet{}
	for _, c := range confs {
		var conf struct {
			Args json.RawMessage `json:"args"`
		}
		if json.Unmarshal(c.Raw, &conf) != nil {
			continue
		}
		if spec, err := cdispec.FromArgs(conf.Args); err == nil && spec != nil {
			key := [2]string{c.Plugin, c.Type}
			pub[key] = append(pub[key], spec)
		}
	}
	return pub
}

// names returns the qualified CDI device names published for request-id
// id by the configs of owner's plugin and type typ, named as the
// publisher names them (cdispec), and only those whose spec file, owned
// by the store, exists.
func (pub publisherSet) names(owner cdispec.Owner, id, typ string) []string {
	var out []string
	for _, spec := range pub[[2]string{owner.Plugin, typ}] {
		name := spec.QualifiedName(id)
		if _, err := os.Stat(spec.Path(owner, id)); err == nil && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}
