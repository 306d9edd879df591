// Command testreport runs `go test -json` and shows what a plain run hides:
// every skipped test with its reason, and the output of every failed one.
// Passing tests are counted, not shown (with -stream every line of output
// is shown as it comes, for the long real-node suites).
//
// Under CI=true a skip fails the run unless the allowlist
// (test/skips.allow) names the test and the condition its reason states
// (docs/testing.md).
//
//	go run ./test/testreport [-allow FILE] [-stream] -- go test -json ./...
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
)

func main() {
	allowPath := flag.String("allow", "test/skips.allow", "the allowlist of skips CI accepts")
	stream := flag.Bool("stream", false, "print every line of test output as it comes")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: testreport [-allow FILE] [-stream] -- go test -json ...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	allow, err := readAllowlist(*allowPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	r := newReport(os.Stdout, *stream)
	readErr := r.read(out)
	runErr := cmd.Wait()
	ok := r.summary(allow, os.Getenv("CI") == "true")
	switch {
	case readErr != nil:
		fmt.Fprintln(os.Stderr, "testreport:", readErr)
		os.Exit(1)
	case runErr != nil:
		fmt.Fprintf(os.Stderr, "testreport: %s: %v\n", strings.Join(flag.Args(), " "), runErr)
		os.Exit(1)
	case !ok:
		os.Exit(1)
	}
}

// event is what `go test -json` prints (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// skip is one skipped test.
type skip struct {
	pkg, test, reason string
}

// report follows the events of one run.
type report struct {
	w      io.Writer
	stream bool
	output map[[2]string][]string // output so far, by package and test
	skips  []skip
	passed int
	failed []string // "package Test"
}

func newReport(w io.Writer, stream bool) *report {
	return &report{w: w, stream: stream, output: map[[2]string][]string{}}
}

// read follows the events until r ends. Lines that are not events (a
// build error) are printed as they are.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(r.w, sc.Text())
			continue
		}
		r.event(e)
	}
	return sc.Err()
}

func (r *report) event(e event) {
	key := [2]string{e.Package, e.Test}
	switch e.Action {
	case "output", "build-output":
		if r.stream || e.Action == "build-output" {
			fmt.Fprint(r.w, e.Output)
		}
		r.output[key] = append(r.output[key], e.Output)
		return
	case "pass":
		if e.Test != "" {
			r.passed++
		} else {
			fmt.Fprintf(r.w, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
	case "skip":
		if e.Test == "" { // a package without tests
			break
		}
		s := skip{pkg: e.Package, test: e.Test, reason: reason(r.output[key])}
		r.skips = append(r.skips, s)
		fmt.Fprintf(r.w, "--- SKIP: %s %s: %s\n", s.pkg, s.test, s.reason)
	case "fail":
		if !r.stream {
			fmt.Fprint(r.w, strings.Join(r.output[key], ""))
		}
		if e.Test != "" {
			r.failed = append(r.failed, e.Package+" "+e.Test)
		} else {
			fmt.Fprintf(r.w, "FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
	default:
		return
	}
	delete(r.output, key)
}

// reason is what a skipped test said: its output without the framework's
// own lines.
func reason(lines []string) string {
	var parts []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		parts = append(parts, l)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}

// summary prints the counts, every skip and every failure, and reports
// whether the skips are acceptable: always, unless ci, when each must be
// on the allowlist.
func (r *report) summary(allow []allowed, ci bool) bool {
	fmt.Fprintf(r.w, "\n%d passed, %d skipped, %d failed\n", r.passed, len(r.skips), len(r.failed))
	ok := true
	for _, s := range r.skips {
		verdict := ""
		if a := match(allow, s); a != nil {
			verdict = " [allowed: " + a.why + "]"
		} else if ci {
			verdict = " [not on the allowlist: fails CI]"
			ok = false
		}
		fmt.Fprintf(r.w, "skipped: %s %s: %s%s\n", s.pkg, s.test, s.reason, verdict)
	}
	for _, f := range r.failed {
		fmt.Fprintf(r.w, "failed:  %s\n", f)
	}
	if !ok {
		fmt.Fprintln(r.w, "CI=true: a skip hides a feature that was never tested; fix the machine or the test, or add it to the allowlist with the condition and why CI may lack it")
	}
	return ok
}

// allowed is one allowlist entry: a test (package and name, subtests
// with their slashes) that CI may skip, the condition its skip reason
// must state, and why CI may lack it.
type allowed struct {
	pkg, test, condition, why string
}

// readAllowlist reads entries of the form
//
//	<package> <Test> | <condition> | <why CI may lack it>
//
// one a line; blank lines and lines starting with # are left out. A
// missing file is an empty list.
func readAllowlist(path string) ([]allowed, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parseAllowlist(path, string(b))
}

func parseAllowlist(path, text string) ([]allowed, error) {
	var out []allowed
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "|")
		for j := range fields {
			fields[j] = strings.TrimSpace(fields[j])
		}
		name := strings.Fields(fields[0])
		if len(fields) != 3 || len(name) != 2 || slices.Contains(fields, "") {
			return nil, fmt.Errorf("%s:%d: want `<package> <Test> | <condition> | <why CI may lack it>`", path, i+1)
		}
		out = append(out, allowed{pkg: name[0], test: name[1], condition: fields[1], why: fields[2]})
	}
	return out, nil
}

// match returns the entry that allows s, or nil.
func match(allow []allowed, s skip) *allowed {
	for i, a := range allow {
		if a.pkg == s.pkg && a.test == s.test && strings.Contains(s.reason, a.condition) {
			return &allow[i]
		}
	}
	return nil
}
