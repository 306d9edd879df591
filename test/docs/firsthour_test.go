package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// The README's fixture-host recipe works: every host it names is one that
// mkhost knows, and its mkhost command builds that host. It also says how
// to keep the demo host.
func TestReadmeMkhostRecipe(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "`make demo KEEP=1`") {
		t.Error("the README does not say how to keep the demo host (make demo KEEP=1)")
	}
	cmd := regexp.MustCompile(`go run \./test/fixture/mkhost -host (\S+) -root (\S+)(?:\s+# or (.*))?`).FindStringSubmatch(string(readme))
	if cmd == nil {
		t.Fatal("the README has no mkhost recipe (go run ./test/fixture/mkhost -host NAME -root DIR)")
	}
	hosts := []string{cmd[1]}
	for _, h := range strings.Split(cmd[3], ",") {
		hosts = append(hosts, strings.TrimPrefix(strings.TrimSpace(h), "-host "))
	}
	for _, h := range hosts {
		if h == "" {
			continue
		}
		if _, ok := fixture.Named(h); !ok {
			if _, err := os.Stat(filepath.Join("../..", h)); err != nil {
				t.Errorf("the README's mkhost recipe names %q, which is neither a fixture host (%v) nor a file", h, fixture.Hosts())
			}
		}
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("go is not on PATH to run the recipe: %v", err)
	}
	root := filepath.Join(t.TempDir(), "host")
	run := exec.Command("go", "run", "./test/fixture/mkhost", "-host", cmd[1], "-root", root)
	run.Dir = "../.."
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", run.Args, err, out)
	}
	if _, err := os.Stat(filepath.Join(root, "sys/class")); err != nil {
		t.Errorf("the recipe built no host: %v", err)
	}
}
