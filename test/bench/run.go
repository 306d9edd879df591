package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// options are the command-line settings.
type options struct {
	bin       string
	n         int
	only      string
	hostLocal bool
	churn     bool
}

// proc is one process to start: a binary, its arguments, environment and
// stdin.
type proc struct {
	bin   string
	args  []string
	env   []string
	stdin string
	// errOK accepts an error answer (a DEL of an unknown id, say).
	errOK bool
}

// scenario is one command on one prepared node.
type scenario struct {
	name  string
	state string                      // state dir; the durable-store floor writes here too
	setup func() error                // brings the node into shape before timing
	each  func(i int) (p, after proc) // run i, and an untimed follow-up (zero bin: none)
	// before runs untimed ahead of run i (for example, changing the inventory).
	before func(i int) error
}

// result is a scenario's measurements.
type result struct {
	name            string
	p50, p90, p99   time.Duration
	execP50, durP50 time.Duration
	startP50        time.Duration // the start-up floor
	rssKiB          int64
}

func run(o options) error {
	work, err := os.MkdirTemp("", "cdi-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if o.bin, err = installAll(o.bin, work, "drm", "generic-tty"); err != nil {
		return err
	}
	fl, err := buildFloors(work)
	if err != nil {
		return err
	}
	scenarios, err := prepare(work, o)
	if err != nil {
		return err
	}
	var results []result
	for _, s := range scenarios {
		if o.only != "" && !strings.Contains(s.name, o.only) {
			continue
		}
		r, err := measure(s, fl, o.n)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		results = append(results, r)
	}
	return report(os.Stdout, results, work)
}

// measure runs a scenario n times, each run next to one run of each floor,
// then a few untimed runs under /usr/bin/time for the child's peak RSS.
func measure(s scenario, fl floors, n int) (result, error) {
	if s.setup != nil {
		if err := s.setup(); err != nil {
			return result{}, fmt.Errorf("setup: %w", err)
		}
	}
	// The durable-store floor writes beside the plugin's store.
	if err := os.MkdirAll(s.state, 0o700); err != nil {
		return result{}, err
	}
	durable := proc{bin: fl.durable, args: []string{filepath.Join(s.state, "floor.db")}}
	var got, execs, starts, durs []time.Duration
	for i := range n {
		if s.before != nil {
			if err := s.before(i); err != nil {
				return result{}, err
			}
		}
		p, after := s.each(i)
		for _, x := range []struct {
			p   proc
			out *[]time.Duration
		}{{proc{bin: fl.exec}, &execs}, {proc{bin: fl.startup, stdin: p.stdin}, &starts}, {durable, &durs}, {p, &got}} {
			d, err := timed(x.p)
			if err != nil {
				return result{}, err
			}
			*x.out = append(*x.out, d)
		}
		if after.bin != "" {
			if _, err := timed(after); err != nil {
				return result{}, fmt.Errorf("follow-up: %w", err)
			}
		}
	}
	rss, err := peakRSS(s, n)
	if err != nil {
		return result{}, err
	}
	return result{name: s.name, p50: pct(got, 50), p90: pct(got, 90), p99: pct(got, 99),
		execP50: pct(execs, 50), startP50: pct(starts, 50), durP50: pct(durs, 50), rssKiB: rss}, nil
}

// peakRSS runs the scenario's command a few more times under GNU time and
// returns the largest maximum resident set size the child reported.
func peakRSS(s scenario, n int) (int64, error) {
	const runs = 5
	var peak int64
	for i := n; i < n+runs; i++ {
		if s.before != nil {
			if err := s.before(i); err != nil {
				return 0, err
			}
		}
		p, after := s.each(i)
		f, err := os.CreateTemp("", "rss")
		if err != nil {
			return 0, err
		}
		f.Close()
		wrapped := p
		wrapped.bin = "/usr/bin/time"
		wrapped.args = append([]string{"-f", "%M", "-o", f.Name(), p.bin}, p.args...)
		_, err = timed(wrapped)
		b, rerr := os.ReadFile(f.Name())
		os.Remove(f.Name())
		if err != nil {
			return 0, err
		}
		if rerr != nil {
			return 0, rerr
		}
		kib, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/usr/bin/time wrote %q: %w", b, err)
		}
		peak = max(peak, kib)
		if after.bin != "" {
			if _, err := timed(after); err != nil {
				return 0, err
			}
		}
	}
	return peak, nil
}

// timed runs one process and returns its wall time from start to exit. An
// error answer or a non-zero exit is an error unless p.errOK.
func timed(p proc) (time.Duration, error) {
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdin = strings.NewReader(p.stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if p.errOK {
		return wall, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %s", filepath.Base(p.bin), err, out.String())
	}
	if bytes.Contains(out.Bytes(), []byte(`"code"`)) {
		return 0, fmt.Errorf("%s answered an error: %s", filepath.Base(p.bin), out.String())
	}
	return wall, nil
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100].Round(time.Microsecond)
}
