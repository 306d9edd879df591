package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/store"
)

// allocation is one row of `cdictl ls`.
type allocation struct {
	RequestID  string    `json:"requestId"`
	Plugin     string    `json:"plugin"`
	Type       string    `json:"type"`
	Spec       string    `json:"spec"`
	Amount     int       `json:"amount"`
	Devices    []string  `json:"devices"`
	DeviceKeys []string  `json:"deviceKeys"`
	NUMA       []int     `json:"numa"`
	Created    time.Time `json:"created"`
	AgeSeconds int64     `json:"ageSeconds"`
}

func lsCommand() *command {
	return &command{name: "ls", args: "", summary: "list every allocation held on the node (read-only)",
		example: "cdictl ls\n  cdictl ls -o json", setup: noFlags((*app).ls)}
}

// ls reads every plugin store in the state directory read-only, under a
// shared lock with a bounded wait, so it never blocks plugins for long and
// never changes anything.
func (a *app) ls(args []string) int {
	if len(args) != 0 {
		return a.usageErr("takes no arguments")
	}
	files, err := filepath.Glob(filepath.Join(a.stateDir, "*.db"))
	if err != nil {
		return a.usageErr("%v", err)
	}
	slices.Sort(files)
	timeout := protocol.DefaultLockTimeout
	if v := a.getenv("CDI_LOCK_TIMEOUT"); v != "" {
		if t, err := protocol.ParseTimeout(v); err == nil {
			timeout = t
		}
	}
	now := time.Now()
	rows := []allocation{}
	failed := false
	for _, f := range files {
		plugin := strings.TrimSuffix(filepath.Base(f), ".db")
		got, err := readStore(f, plugin, timeout, now)
		if err != nil {
			fmt.Fprintf(a.stderr, "cdictl: %s: %v\n", f, err)
			failed = true
			continue
		}
		rows = append(rows, got...)
	}
	a.report("REQUEST-ID\tPLUGIN\tREQUEST\tDEVICES\tNUMA\tAGE", rowsOf(rows, func(r *allocation) []string {
		numa := "-"
		if len(r.NUMA) > 0 {
			numa = strings.Trim(strings.ReplaceAll(fmt.Sprint(r.NUMA), " ", ","), "[]")
		}
		return []string{r.RequestID, r.Plugin, fmt.Sprintf("%s:%d", r.Spec, r.Amount), strings.Join(r.Devices, " "), numa, (time.Duration(r.AgeSeconds) * time.Second).String()}
	}), protocol.Field{Key: "cdiVersion", Value: protocol.Latest}, protocol.Field{Key: "allocations", Value: rows})
	return status(failed)
}

func readStore(path, plugin string, timeout time.Duration, now time.Time) ([]allocation, error) {
	s, err := store.Open(path, store.Options{ReadOnly: true, Timeout: timeout})
	if errors.Is(err, store.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var rows []allocation
	err = s.View(func(tx *store.Tx) error {
		return tx.ForEach(func(r *store.Record) error {
			for _, al := range r.Allocations {
				row := allocation{RequestID: r.ID, Plugin: plugin, Type: r.Type, Spec: al.Spec, Amount: al.Amount,
					Devices: []string{}, DeviceKeys: []string{}, NUMA: []int{}, Created: al.Created,
					AgeSeconds: int64(now.Sub(al.Created).Seconds())}
				for _, d := range al.Devices {
					row.Devices = append(row.Devices, d.Nodes...)
					row.DeviceKeys = append(row.DeviceKeys, d.Key)
					if d.NUMA >= 0 && !slices.Contains(row.NUMA, d.NUMA) {
						row.NUMA = append(row.NUMA, d.NUMA)
					}
				}
				slices.Sort(row.NUMA)
				rows = append(rows, row)
			}
			return nil
		})
	})
	return rows, err
}
