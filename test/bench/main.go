// Command bench measures whole plugin invocations the way the workload runs
// them: one process per command. Each scenario alternates its command with
// a trivial static Go binary (the exec floor), so the ratio of medians is
// measured under the same machine conditions.
//
//	go run ./test/bench -bin bin -n 300
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/test/fixture"
)

func main() {
	binDir := flag.String("bin", "bin", "directory with the plugin binaries")
	n := flag.Int("n", 300, "runs per scenario")
	only := flag.String("run", "", "run only scenarios whose name contains this")
	flag.Parse()
	if err := run(*binDir, *n, *only); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// sample is one timed process run.
type sample struct {
	wall time.Duration
	rss  int64 // KiB
}

// scenario is one command on one prepared node.
type scenario struct {
	name  string
	bin   string
	conf  string
	env   []string
	setup func(env []string) error // brings the store into shape before timing
	// each returns extra env for run i (for example a fresh request-id) and
	// an optional follow-up that runs untimed.
	each func(i int) (env []string, after []string)
}

func run(binDir string, n int, only string) error {
	work, err := os.MkdirTemp("", "cdi-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	binDir, err = filepath.Abs(binDir)
	if err != nil {
		return err
	}
	floor, err := buildFloor(work)
	if err != nil {
		return err
	}
	scenarios, err := prepare(work, binDir)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tp50\tp90\tp99\tfloor p50\tratio\tpeak RSS\t")
	p50s := map[string]time.Duration{}
	for _, s := range scenarios {
		if only != "" && !strings.Contains(s.name, only) {
			continue
		}
		if s.setup != nil {
			if err := s.setup(s.env); err != nil {
				return fmt.Errorf("%s setup: %w", s.name, err)
			}
		}
		var got, base []sample
		for i := range n {
			extra, after := []string(nil), []string(nil)
			if s.each != nil {
				extra, after = s.each(i)
			}
			fs, err := exec1(floor, nil, "")
			if err != nil {
				return err
			}
			base = append(base, fs)
			env := append(slices.Clone(s.env), extra...)
			ps, err := exec1(s.bin, env, s.conf)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			got = append(got, ps)
			if after != nil {
				if _, err := exec1(s.bin, append(slices.Clone(s.env), after...), s.conf); err != nil {
					return fmt.Errorf("%s follow-up: %w", s.name, err)
				}
			}
		}
		p50, fp50 := pct(got, 50), pct(base, 50)
		p50s[s.name] = p50
		fmt.Fprintf(tw, "%s\t%v\t%v\t%v\t%v\t%.2f×\t%.1f MiB\t\n", s.name, p50, pct(got, 90), pct(got, 99), fp50,
			float64(p50)/float64(fp50), float64(maxRSS(got))/1024)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	ratio := func(label, a, b string, target float64) {
		if p50s[a] == 0 || p50s[b] == 0 {
			return
		}
		r := float64(p50s[a]) / float64(p50s[b])
		verdict := "meets"
		if r > target {
			verdict = "MISSES"
		}
		fmt.Printf("%-44s %.2f× (target ≤ %.1f×: %s)\n", label, r, target, verdict)
	}
	fmt.Println()
	ratio("INFO 256 GPUs / INFO 8 GPUs", "gpu256 INFO", "gpu8 INFO", 1.3)
	ratio("ADD after 10000 ADD/DEL / ADD on a fresh store", "gpu64 ADD (after 10000 ADD/DEL)", "gpu64 ADD (fresh store)", 1.2)
	ratio("ADD after 10000 ADD/DEL / same 48 held, no history", "gpu64 ADD (after 10000 ADD/DEL)", "gpu64 ADD (48 allocated)", 1.2)
	for _, st := range []string{"g64-fresh", "g64-48", "g64-churn"} {
		if fi, err := os.Stat(filepath.Join(work, "state", st, "drm.db")); err == nil {
			fmt.Printf("store size %-35s %d KiB\n", st, fi.Size()/1024)
		}
	}
	return nil
}

func pct(s []sample, p int) time.Duration {
	d := make([]time.Duration, len(s))
	for i, x := range s {
		d[i] = x.wall
	}
	slices.Sort(d)
	return d[(len(d)-1)*p/100].Round(time.Microsecond)
}

func maxRSS(s []sample) int64 {
	var m int64
	for _, x := range s {
		m = max(m, x.rss)
	}
	return m
}

// exec1 runs one process and times it from start to exit.
func exec1(bin string, env []string, stdin string) (sample, error) {
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() != 0 {
		return sample{}, fmt.Errorf("%s exited %d: %s", bin, ee.ExitCode(), out.String())
	} else if err != nil {
		return sample{}, err
	}
	if bytes.Contains(out.Bytes(), []byte(`"code"`)) {
		return sample{}, fmt.Errorf("%s answered an error: %s", bin, out.String())
	}
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	var rss int64
	if ru != nil {
		rss = ru.Maxrss
	}
	return sample{wall: wall, rss: rss}, nil
}

// buildFloor builds the trivial static binary the ratios are measured
// against.
func buildFloor(work string) (string, error) {
	dir := filepath.Join(work, "floor")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	files := map[string]string{
		"go.mod":  "module floor\n\ngo 1.26\n",
		"main.go": "package main\n\nfunc main() {}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(work, "floor-bin")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the floor binary: %v\n%s", err, out)
	}
	return bin, nil
}

// gpus lays out count GPUs spread evenly over nodes NUMA nodes.
func gpus(count, nodes int) fixture.Host {
	var h fixture.Host
	for i := range count {
		h.GPUs = append(h.GPUs, fixture.GPU{
			Addr: fmt.Sprintf("0000:%02x:%02x.0", 0x10+i/32, i%32), Vendor: "0x10de", Device: "0x2330",
			NUMA: fixture.Int(i * nodes / count), Driver: "nvidia", Card: i, Render: 128 + i, Control: -1,
		})
	}
	return h
}

func prepare(work, binDir string) ([]scenario, error) {
	hosts := map[string]fixture.Host{
		"tty63":  {TTYs: map[string]int{"tty": 64}},
		"gpu1":   gpus(1, 1),
		"gpu8":   gpus(8, 2),
		"gpu64":  gpus(64, 4),
		"gpu256": gpus(256, 4),
	}
	demo, err := fixture.Load("demo/host.json")
	if err != nil {
		return nil, fmt.Errorf("the demo host (run from the repository root): %w", err)
	}
	hosts["demo"] = demo
	roots := map[string]string{}
	for name, h := range hosts {
		root := filepath.Join(work, "hosts", name)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, err
		}
		if err := h.Build(root); err != nil {
			return nil, err
		}
		roots[name] = root
	}
	ttyConf := `{"cdiVersion":"0.0.2","name":"tty","type":"tty","plugin":"generic-tty","args":{"num_system_reserved":12}}`
	gpuConf := `{"cdiVersion":"0.0.2","name":"gpu","type":"gpu","plugin":"drm"}`
	base := func(host, state string) []string {
		return []string{"CDI_HOST_ROOT=" + roots[host], "CDI_STATE_DIR=" + filepath.Join(work, "state", state), "CDI_VERSION=" + protocol.Latest}
	}
	tty := filepath.Join(binDir, "generic-tty")
	drm := filepath.Join(binDir, "drm")
	// fill allocates count devices one request at a time.
	fill := func(bin, conf, typ string, count int) func([]string) error {
		return func(env []string) error {
			for i := range count {
				e := append(slices.Clone(env), "CDI_COMMAND=ADD", "CDI_REQUEST="+typ+":1", fmt.Sprintf("CDI_REQUEST_ID=fill%d", i))
				if _, err := exec1(bin, e, conf); err != nil {
					return err
				}
			}
			return nil
		}
	}
	// churn runs cycles ADD/DEL pairs, as a long-lived node would have.
	churn := func(bin, conf, typ string, cycles int, then func([]string) error) func([]string) error {
		return func(env []string) error {
			for i := range cycles {
				id := fmt.Sprintf("CDI_REQUEST_ID=churn%d", i)
				if _, err := exec1(bin, append(slices.Clone(env), "CDI_COMMAND=ADD", "CDI_REQUEST="+typ+":1", id), conf); err != nil {
					return err
				}
				if _, err := exec1(bin, append(slices.Clone(env), "CDI_COMMAND=DEL", id), conf); err != nil {
					return err
				}
			}
			if then != nil {
				return then(env)
			}
			return nil
		}
	}
	addDel := func(typ string) func(int) ([]string, []string) {
		return func(i int) ([]string, []string) {
			id := fmt.Sprintf("CDI_REQUEST_ID=b%d", i)
			return []string{"CDI_COMMAND=ADD", "CDI_REQUEST=" + typ + ":1", id}, []string{"CDI_COMMAND=DEL", id}
		}
	}
	delAdd := func(typ string) func(int) ([]string, []string) {
		return func(i int) ([]string, []string) {
			id := fmt.Sprintf("CDI_REQUEST_ID=d%d", i)
			// The ADD runs untimed before the next DEL: prime once in setup.
			return []string{"CDI_COMMAND=DEL", id}, []string{"CDI_COMMAND=ADD", "CDI_REQUEST=" + typ + ":1", fmt.Sprintf("CDI_REQUEST_ID=d%d", i+1)}
		}
	}
	info := func(int) ([]string, []string) { return []string{"CDI_COMMAND=INFO"}, nil }
	prime := func(bin, conf, typ string, then func([]string) error) func([]string) error {
		return func(env []string) error {
			if then != nil {
				if err := then(env); err != nil {
					return err
				}
			}
			_, err := exec1(bin, append(slices.Clone(env), "CDI_COMMAND=ADD", "CDI_REQUEST="+typ+":1", "CDI_REQUEST_ID=d0"), conf)
			return err
		}
	}
	conf := func(rel string) string {
		b, err := os.ReadFile(filepath.Join("demo", "conf", rel))
		if err != nil {
			panic(err) // the bundled configs are part of the repository
		}
		return string(b)
	}
	demoTTY, demoGPU := conf("tty.d/generic-tty.conf"), conf("gpu.d/drm.conf")
	return []scenario{
		{name: "demo host tty INFO", bin: tty, conf: demoTTY, env: base("demo", "demo-tty-info"), each: info},
		{name: "demo host tty ADD", bin: tty, conf: demoTTY, env: base("demo", "demo-tty-add"), each: addDel("tty")},
		{name: "demo host gpu INFO", bin: drm, conf: demoGPU, env: base("demo", "demo-gpu-info"), each: info},
		{name: "demo host gpu ADD", bin: drm, conf: demoGPU, env: base("demo", "demo-gpu-add"), each: addDel("gpu")},
		{name: "tty63 INFO", bin: tty, conf: ttyConf, env: base("tty63", "tty-info"), each: info},
		{name: "tty63 ADD (fresh store)", bin: tty, conf: ttyConf, env: base("tty63", "tty-add"), each: addDel("tty")},
		{name: "tty63 DEL", bin: tty, conf: ttyConf, env: base("tty63", "tty-del"), setup: prime(tty, ttyConf, "tty", nil), each: delAdd("tty")},
		{name: "gpu1 INFO", bin: drm, conf: gpuConf, env: base("gpu1", "g1"), each: info},
		{name: "gpu8 INFO", bin: drm, conf: gpuConf, env: base("gpu8", "g8"), each: info},
		{name: "gpu64 INFO", bin: drm, conf: gpuConf, env: base("gpu64", "g64"), each: info},
		{name: "gpu256 INFO", bin: drm, conf: gpuConf, env: base("gpu256", "g256"), each: info},
		{name: "gpu64 ADD (fresh store)", bin: drm, conf: gpuConf, env: base("gpu64", "g64-fresh"), each: addDel("gpu")},
		{name: "gpu64 ADD (48 allocated)", bin: drm, conf: gpuConf, env: base("gpu64", "g64-48"), setup: fill(drm, gpuConf, "gpu", 48), each: addDel("gpu")},
		{name: "gpu64 DEL (48 allocated)", bin: drm, conf: gpuConf, env: base("gpu64", "g64-48d"), setup: prime(drm, gpuConf, "gpu", fill(drm, gpuConf, "gpu", 48)), each: delAdd("gpu")},
		{name: "gpu64 ADD (after 10000 ADD/DEL)", bin: drm, conf: gpuConf, env: base("gpu64", "g64-churn"), setup: churn(drm, gpuConf, "gpu", 10000, fill(drm, gpuConf, "gpu", 48)), each: addDel("gpu")},
	}, nil
}
