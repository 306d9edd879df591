// Command bench measures whole plugin invocations the way the workload runs
// them: one process per command. Each run of a scenario is interleaved with
// two floors built the same way as the plugins, so every ratio compares
// medians measured under the same machine conditions:
//
//   - the exec floor, a static Go binary that does nothing;
//   - the durable-store floor, a static Go binary that does one bbolt
//     Update (open, put, commit with two fdatasyncs, close) in the same
//     state directory, which no durable ADD or DEL can beat.
//
// Peak RSS is measured in the child by /usr/bin/time, because a Go parent's
// rusage reports its own high-water mark for a child it forked.
//
//	go run ./test/bench -bin bin -n 300
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin", "directory with the plugin binaries")
	flag.IntVar(&o.n, "n", 300, "timed runs per scenario")
	flag.StringVar(&o.only, "run", "", "run only scenarios whose name contains this")
	flag.BoolVar(&o.hostLocal, "host-local", true, "also measure CNI host-local "+hostLocalVersion+", built from the Go module proxy")
	flag.BoolVar(&o.churn, "churn", true, "also measure ADD after 10,000 ADD/DEL cycles")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
