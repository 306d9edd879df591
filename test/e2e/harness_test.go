// Package e2e runs the real plugin binaries as a caller would: environment
// variables, a config on stdin, JSON on stdout and an exit status, against
// fixture hosts laid out under temporary directories.
package e2e

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/test/fixture"
)

var update = flag.Bool("update", false, "rewrite golden files with the current output")

// binDir holds the binaries under test: $CDI_TEST_BIN_DIR (make test sets
// it to bin/), or a fresh build.
var binDir string

func TestMain(m *testing.M) {
	if path := os.Getenv("CDI_E2E_HOLD_LOCK"); path != "" {
		holdLock(path)
		return
	}
	flag.Parse()
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	binDir = os.Getenv("CDI_TEST_BIN_DIR")
	if binDir == "" {
		dir, err := os.MkdirTemp("", "cdi-e2e-bin")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		cmd := exec.Command("go", "build", "-o", dir+"/", "../../plugins/...", "../../cmd/...")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("building binaries: %w", err)
		}
		binDir = dir
	}
	abs, err := filepath.Abs(binDir)
	if err != nil {
		return 0, err
	}
	binDir = abs
	return m.Run(), nil
}

// holdLock is the body of a helper process that holds a store's lock until
// its stdin closes, so tests can contend with a real second process.
func holdLock(path string) {
	s, err := store.Open(path, store.Options{Timeout: 5 * time.Second})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Close()
}

// node is a fixture host with a state dir.
type node struct {
	t     *testing.T
	root  string
	state string
}

func newNode(t *testing.T, h fixture.Host) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{t: t, root: filepath.Join(dir, "host"), state: filepath.Join(dir, "state")}
	if err := os.MkdirAll(n.root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := h.Build(n.root); err != nil {
		t.Fatal(err)
	}
	return n
}

// result is one plugin run.
type result struct {
	stdout, stderr string
	status         int
}

// obj decodes stdout, failing the test unless it is exactly one
// well-formed object of the protocol's shape.
func (r result) obj(t *testing.T) map[string]any {
	t.Helper()
	if r.stdout == "" {
		return nil
	}
	checkFormat(t, r.stdout)
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// code returns the error code printed, or 0.
func (r result) code(t *testing.T) int {
	t.Helper()
	c, _ := r.obj(t)["code"].(float64)
	return int(c)
}

// devices returns the devices of an ADD answer.
func (r result) devices(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, d := range r.obj(t)["devices"].([]any) {
		out = append(out, d.(string))
	}
	return out
}

// checkFormat asserts one JSON object, two-space indent, cdiVersion first.
func checkFormat(t *testing.T, out string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value:\n%s", out)
	}
	var want bytes.Buffer
	if err := json.Indent(&want, []byte(out), "", "  "); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(want.String()) != strings.TrimSpace(out) {
		t.Fatalf("stdout is not indented with two spaces:\n%s", out)
	}
	if !strings.HasPrefix(out, "{\n  \"cdiVersion\": \"") {
		t.Fatalf("cdiVersion is not the first field:\n%s", out)
	}
}

// run executes a plugin binary with only the given environment (plus the
// node's root and state dir) and config on stdin.
func (n *node) run(plugin, conf string, env ...string) result {
	n.t.Helper()
	return runBin(n.t, filepath.Join(binDir, plugin), conf, append([]string{
		"CDI_HOST_ROOT=" + n.root, "CDI_STATE_DIR=" + n.state,
	}, env...))
}

func runBin(t *testing.T, bin, stdin string, env []string) result {
	t.Helper()
	return run(t, exec.Command(bin), stdin, env)
}

// runArgs runs a command-line tool with arguments and no stdin.
func runArgs(t *testing.T, bin string, args, env []string) result {
	t.Helper()
	return run(t, exec.Command(bin, args...), "", env)
}

func run(t *testing.T, cmd *exec.Cmd, stdin string, env []string) result {
	t.Helper()
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	status := 0
	if ee, ok := err.(*exec.ExitError); ok {
		status = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running %s: %v", cmd.Path, err)
	}
	return result{stdout: out.String(), stderr: errOut.String(), status: status}
}

// records reads every record of a plugin's store and checks the index.
func (n *node) records(plugin string) map[string]*store.Record {
	n.t.Helper()
	s, err := store.Open(store.Path(n.state, plugin), store.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		n.t.Fatal(err)
	}
	defer s.Close()
	out := map[string]*store.Record{}
	err = s.View(func(tx *store.Tx) error {
		if p := tx.Check(); len(p) > 0 {
			return fmt.Errorf("store inconsistent: %v", p)
		}
		return tx.ForEach(func(r *store.Record) error { out[r.ID] = r; return nil })
	})
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

// storeID returns the identity of a plugin's store, which names the spec
// files it owns.
func (n *node) storeID(plugin string) string {
	n.t.Helper()
	s, err := store.Open(store.Path(n.state, plugin), store.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		n.t.Fatal(err)
	}
	defer s.Close()
	var id string
	if err := s.View(func(tx *store.Tx) error { id = tx.ID(); return nil }); err != nil || id == "" {
		n.t.Fatalf("store identity %q: %v", id, err)
	}
	return id
}

// forget deletes a request's record behind the plugin's back, as a crash
// between a DEL's commit and its clean-up leaves the node.
func (n *node) forget(plugin, id string) {
	n.t.Helper()
	s, err := store.Open(store.Path(n.state, plugin), store.Options{Timeout: 5 * time.Second})
	if err != nil {
		n.t.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(func(tx *store.Tx) error { _, err := tx.Delete(id); return err }); err != nil {
		n.t.Fatal(err)
	}
}

// golden compares stdout with testdata/<name>.golden: semantically as JSON,
// and byte for byte apart from whitespace. -update rewrites the file.
func golden(t *testing.T, name string, r result) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(r.stdout), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./test/e2e -update to create it)", err)
	}
	if len(want) == 0 {
		if r.stdout != "" {
			t.Fatalf("%s: want no output, got:\n%s", name, r.stdout)
		}
		return
	}
	checkFormat(t, r.stdout)
	var got, exp any
	_ = json.Unmarshal([]byte(r.stdout), &got)
	if err := json.Unmarshal(want, &exp); err != nil {
		t.Fatalf("%s: golden file is not JSON: %v", path, err)
	}
	if !reflect.DeepEqual(got, exp) {
		t.Fatalf("%s: got\n%s\nwant\n%s", name, r.stdout, want)
	}
	if squash(r.stdout) != squash(string(want)) {
		t.Fatalf("%s: same JSON, different text: got\n%s\nwant\n%s", name, r.stdout, want)
	}
}

func squash(s string) string {
	return strings.Join(strings.Fields(s), "")
}

// env builds a CDI environment from name=value pairs, dropping empty values.
func env(kv ...string) []string {
	return slices.DeleteFunc(kv, func(s string) bool { return strings.HasSuffix(s, "=") })
}

// goldenStep is one command of a scripted sequence and its golden output.
type goldenStep struct {
	golden string
	env    []string
	status int
}

// goldenSteps runs the steps in order on the node, checking each exit
// status and stdout against its golden file.
func (n *node) goldenSteps(t *testing.T, plugin, conf string, steps []goldenStep) {
	t.Helper()
	for i, s := range steps {
		r := n.run(plugin, conf, s.env...)
		if r.status != s.status {
			t.Fatalf("step %d (%s): status %d, want %d\n%s%s", i, s.golden, r.status, s.status, r.stdout, r.stderr)
		}
		golden(t, s.golden, r)
	}
}

// nobodyCopy returns a copy of the binary name that uid 65534 can execute.
// The binary directory may sit in a checkout no other user can traverse
// (a clone under a 0700 home), so tests that run a binary as another user
// run this copy, in a 0755 directory of its own under the system's
// temporary directory, removed when the test ends.
func nobodyCopy(t *testing.T, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cdi-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(binDir, name))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}
