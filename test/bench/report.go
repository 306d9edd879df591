package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"
)

// target is one goal of docs/performance.md: the ratio of a scenario's
// median to a reference, and the most it may be. The reference is the
// floor measured beside the scenario (the exec floor, or the durable-store
// floor when durable is set), or, when against names another scenario,
// that scenario's median. Then each median is first divided by its own
// floor: the two scenarios ran minutes apart, and their floors carry the
// load each ran under. The plain ratio of the medians is printed beside
// it.
type target struct {
	label   string
	of      string
	against string // another scenario; "" for the floor itself
	durable bool   // the durable-store floor, not the exec floor
	max     float64
}

var targets = []target{
	{label: "INFO, 64 GPUs / exec floor", of: "gpu64 INFO", max: 1.25},
	{label: "INFO, 256 GPUs / INFO, 8 GPUs", of: "gpu256 INFO", against: "gpu8 INFO", max: 1.1},
	{label: "INFO, 1024 GPUs / exec floor", of: "gpu1024 INFO", max: 1.3},
	{label: "ADD, 64 GPUs, 48 held / durable-store floor", of: "gpu64 ADD (48 held)", durable: true, max: 1.2},
	{label: "DEL, 64 GPUs, 48 held / durable-store floor", of: "gpu64 DEL (48 held)", durable: true, max: 1.1},
	{label: "ADD after 10000 ADD/DEL / same 48 held", of: "gpu64 ADD (48 held, after 10000 ADD/DEL)", against: "gpu64 ADD (48 held)", durable: true, max: 1.2},
}

// floored is a scenario's median as a multiple of the floor t names.
func (t target) floored(r result) float64 {
	if t.durable {
		return ratio(r.p50, r.durP50)
	}
	return ratio(r.p50, r.execP50)
}

// report prints the table of every scenario, the target verdicts, the peak
// RSS bound and the store sizes.
func report(w io.Writer, rs []result, work string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tp50\tp90\tp99\texec floor\t×exec\tstart-up floor\t×start-up\tdurable floor\t×durable\tpeak RSS\t")
	byName := map[string]result{}
	var peak int64
	for _, r := range rs {
		byName[r.name] = r
		peak = max(peak, r.rssKiB)
		fmt.Fprintf(tw, "%s\t%v\t%v\t%v\t%v\t%.2f×\t%v\t%.2f×\t%v\t%.2f×\t%.1f MiB\t\n", r.name, r.p50, r.p90, r.p99,
			r.execP50, ratio(r.p50, r.execP50), r.startP50, ratio(r.p50, r.startP50),
			r.durP50, ratio(r.p50, r.durP50), float64(r.rssKiB)/1024)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if r, ok := byName["gpu64 INFO"]; ok {
		fmt.Fprintf(w, "%-50s %6.2f (no target: what every Go plugin with these dependencies pays)\n",
			"start-up floor / exec floor", ratio(r.startP50, r.execP50))
	}
	for _, t := range targets {
		r, ok := byName[t.of]
		if !ok {
			continue
		}
		if t.against == "" {
			verdict(w, t.label, t.floored(r), t.max)
			continue
		}
		o, ok := byName[t.against]
		if !ok {
			continue
		}
		verdict(w, t.label, t.floored(r)/t.floored(o), t.max)
		fmt.Fprintf(w, "%-50s %6.2f (the medians alone)\n", "", ratio(r.p50, o.p50))
	}
	if peak > 0 {
		verdict(w, "peak RSS of a plugin process, MiB", float64(peak)/1024, 15)
	}
	for _, st := range []string{"gpu64-add", "gpu64-fresh", "gpu64-churn", "gpu1024-add"} {
		if fi, err := os.Stat(filepath.Join(work, "state", st, "drm.db")); err == nil {
			fmt.Fprintf(w, "store size %-40s %d KiB\n", st, fi.Size()/1024)
		}
	}
	return nil
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func verdict(w io.Writer, label string, got, most float64) {
	v := "meets"
	if got > most {
		v = "MISSES"
	}
	fmt.Fprintf(w, "%-50s %6.2f (target ≤ %.2f: %s)\n", label, got, most, v)
}
