// Package sdk tests the SDK, pkg/, as a plugin author outside this module
// uses it: plugin/ is such a plugin, a module of its own that replaces
// github.com/cdi-exec/plugins with this checkout. The tests build it and
// run it through pkg/caller on a fixture host, and check that no exported
// signature of pkg/ names a type an outside module cannot import.
package sdk

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
	"github.com/cdi-exec/plugins/test/fixture"
)

// requires returns the require directives of a go.mod: module path →
// version.
func requires(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	block := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "//")
		fields := strings.Fields(line)
		switch {
		case len(fields) == 2 && fields[0] == "require" && fields[1] == "(":
			block = true
		case block && len(fields) == 1 && fields[0] == ")":
			block = false
		case block && len(fields) == 2:
			out[fields[0]] = fields[1]
		case len(fields) == 3 && fields[0] == "require":
			out[fields[1]] = fields[2]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// lines returns the set of a file's non-empty lines.
func lines(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for l := range strings.SplitSeq(string(b), "\n") {
		if l != "" {
			out[l] = true
		}
	}
	return out
}

// TestPluginModuleMatches: the outside plugin's module needs nothing this
// module does not have: each module it requires at this module's version,
// each checksum one of this module's go.sum. So it builds from the module
// cache that this module's build filled, without a network.
func TestPluginModuleMatches(t *testing.T) {
	ours := requires(t, "../../go.mod")
	theirs := requires(t, "plugin/go.mod")
	if theirs["github.com/cdi-exec/plugins"] == "" {
		t.Errorf("plugin/go.mod does not require github.com/cdi-exec/plugins: %v", theirs)
	}
	for mod, v := range theirs {
		if mod != "github.com/cdi-exec/plugins" && ours[mod] != v {
			t.Errorf("plugin/go.mod requires %s %s; go.mod has %q (make them one, then go mod tidy in test/sdk/plugin)", mod, v, ours[mod])
		}
	}
	sums := lines(t, "../../go.sum")
	for l := range lines(t, "plugin/go.sum") {
		if !sums[l] {
			t.Errorf("plugin/go.sum has %q, which go.sum lacks", l)
		}
	}
}

// buildPlugin builds plugin/ into a temporary directory and returns it.
// -mod=readonly: a go.mod or go.sum that needs a change fails the build
// rather than being rewritten in the checkout; -buildvcs=false: the
// checkout's git status is no concern of the build (nor its ownership).
func buildPlugin(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	cmd := exec.Command("go", "build", "-mod=readonly", "-buildvcs=false", "-o", bin+"/", ".")
	cmd.Dir = "plugin"
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building test/sdk/plugin, a module outside this one: %v\n%s", err, out)
	}
	return bin
}

// code is the protocol code of a caller error, 0 for none.
func code(err error) int {
	var pe *caller.PluginError
	if errors.As(err, &pe) {
		return pe.Code()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestOutsidePlugin builds the outside plugin and runs it as a caller
// would: INFO, ADD, its replay, DEVICES, an ADD that cannot be met, DEL
// (which tears down through pool.Setup), and a config it refuses.
func TestOutsidePlugin(t *testing.T) {
	bin := buildPlugin(t)
	dir := t.TempDir()
	root, state, confDir := filepath.Join(dir, "host"), filepath.Join(dir, "state"), filepath.Join(dir, "conf")
	specDir, teardownLog := filepath.Join(dir, "cdi"), filepath.Join(dir, "teardown.log")
	if err := (fixture.Host{TTYs: map[string]int{"ttyS": 4, "tty": 2}}).Build(root); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`{"cdiVersion": "0.0.2", "name": "serial", "type": "serial", "plugin": "serial",
  "args": {"reserved": 1, "teardown_log": %q, "cdi_spec": {"kind": "example.com/serial", "dir": %q}}}`, teardownLog, specDir)
	bad := `{"cdiVersion": "0.0.2", "name": "bad", "type": "serial", "plugin": "serial", "args": {"reserverd": 1}}`
	if err := os.MkdirAll(filepath.Join(confDir, "serial.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]string{"10-serial.conf": conf, "20-bad.conf": bad} {
		if err := os.WriteFile(filepath.Join(confDir, "serial.d", name), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	confs, problems := caller.Load(confDir)
	if len(confs) != 2 || len(problems) != 0 {
		t.Fatalf("configs %v, problems %v", confs, problems)
	}
	good, refused := confs[0], confs[1]
	c := caller.Caller{Path: bin, Timeout: 10 * time.Second,
		Env: []string{protocol.EnvHostRoot + "=" + root, protocol.EnvStateDir + "=" + state}}
	ctx := context.Background()

	if info, err := c.Info(ctx, good); err != nil || !reflect.DeepEqual(info, map[string]int{"serial": 3}) {
		t.Fatalf("INFO = %v, %v; want 3 ports (ttyS0 reserved)", info, err)
	}
	items := []request.Item{{Spec: request.Spec{Type: "serial"}, Amount: 2}}
	want := []string{"/dev/ttyS1", "/dev/ttyS2"}
	added, err := c.Add(ctx, good, "pod-a", items, nil)
	if err != nil || !slices.Equal(added.Devices, want) {
		t.Fatalf("ADD = %+v, %v; want %v", added, err, want)
	}
	if len(added.CDIDevices) != 1 || !strings.HasPrefix(added.CDIDevices[0], "example.com/serial=") {
		t.Errorf("ADD's CDI devices %v; want one of kind example.com/serial", added.CDIDevices)
	}
	if specs, _ := filepath.Glob(filepath.Join(specDir, "*.json")); len(specs) != 1 {
		t.Errorf("CDI spec files after ADD: %v; want one", specs)
	}
	if again, err := c.Add(ctx, good, "pod-a", items, nil); err != nil || !slices.Equal(again.Devices, want) {
		t.Errorf("replayed ADD = %+v, %v; want %v again", again, err, want)
	}
	r, err := c.Extension(ctx, good, protocol.CmdDevices)
	if err != nil || !strings.Contains(string(r.Raw), `"heldBy": "pod-a"`) || !strings.Contains(string(r.Raw), "reserved for the host") {
		t.Errorf("DEVICES = %v, %v; want ttyS1 and ttyS2 held by pod-a, ttyS0 reserved", r, err)
	}
	if _, err := c.Add(ctx, good, "pod-b", items, nil); code(err) != protocol.CodeInsufficient {
		t.Errorf("ADD of 2 with 1 free: %v; want code %d", err, protocol.CodeInsufficient)
	}

	if held, err := c.Del(ctx, good, "pod-a"); !held || err != nil {
		t.Errorf("DEL = %v, %v", held, err)
	}
	if b, err := os.ReadFile(teardownLog); err != nil || string(b) != "pod-a serial owner=\"\" serial=ttyS1,ttyS2\n" {
		t.Errorf("teardown log %q, %v; want the freed record", b, err)
	}
	if specs, _ := filepath.Glob(filepath.Join(specDir, "*.json")); len(specs) != 0 {
		t.Errorf("CDI spec files after DEL: %v", specs)
	}
	if held, err := c.Del(ctx, good, "pod-a"); held || err != nil {
		t.Errorf("second DEL = %v, %v; want nothing held", held, err)
	}
	if info, err := c.Info(ctx, good); err != nil || info["serial"] != 3 {
		t.Errorf("INFO after DEL = %v, %v", info, err)
	}

	if _, err := c.Info(ctx, refused); code(err) != protocol.CodeInvalidConfig || !strings.Contains(err.Error(), "reserverd") {
		t.Errorf("INFO of a misspelt arg: %v; want code %d naming it", err, protocol.CodeInvalidConfig)
	}
}

// TestPublicAPINamesNoInternalType: no exported declaration of pkg/ names
// a type of an internal package in what an outside package must write:
// function and method signatures, interface methods, exported fields,
// the types of exported variables and constants. (An alias of an
// internal type may be named through the alias, and unexported fields
// are not the author's.)
func TestPublicAPINamesNoInternalType(t *testing.T) {
	dirs, err := filepath.Glob("../../pkg/*")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var found []string
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			found = append(found, internalNames(fset, f)...)
		}
	}
	if len(dirs) == 0 {
		t.Fatal("no packages under pkg/")
	}
	for _, f := range found {
		t.Errorf("%s", f)
	}
}

// internalNames returns, as "file:line: name", each internal type that
// f's exported declarations name.
func internalNames(fset *token.FileSet, f *ast.File) []string {
	internal := map[string]bool{} // the local names of internal imports
	for _, imp := range f.Imports {
		path := strings.Trim(imp.Path.Value, `"`)
		if !strings.Contains(path, "/internal/") {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		internal[name] = true
	}
	var out []string
	var check func(n ast.Node)
	check = func(n ast.Node) {
		ast.Inspect(n, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.StructType:
				for _, fl := range n.Fields.List {
					if exportedField(fl) {
						check(fl.Type)
					}
				}
				return false
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && internal[x.Name] {
					out = append(out, fmt.Sprintf("%s: %s.%s", fset.Position(n.Pos()), x.Name, n.Sel.Name))
				}
			}
			return true
		})
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() && (d.Recv == nil || exportedRecv(d.Recv)) {
				check(d.Type)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() && !s.Assign.IsValid() {
						check(s.Type)
					}
				case *ast.ValueSpec:
					if s.Type != nil && slices.ContainsFunc(s.Names, (*ast.Ident).IsExported) {
						check(s.Type)
					}
				}
			}
		}
	}
	return out
}

// exportedField reports whether a struct field is one an outside package
// sees: a named exported field, or an embedded exported type.
func exportedField(fl *ast.Field) bool {
	if len(fl.Names) > 0 {
		return slices.ContainsFunc(fl.Names, (*ast.Ident).IsExported)
	}
	return ast.IsExported(typeName(fl.Type))
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(recv *ast.FieldList) bool {
	return len(recv.List) == 1 && ast.IsExported(typeName(recv.List[0].Type))
}

// typeName is the name of a (pointer to, generic instance of) named type.
func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return typeName(e.X)
	case *ast.IndexExpr:
		return typeName(e.X)
	case *ast.IndexListExpr:
		return typeName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}
