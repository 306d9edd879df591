package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
	"github.com/cdi-exec/plugins/test/manifests"
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
	for _, h := range fixture.Hosts() {
		if !slices.Contains(hosts, h) {
			t.Errorf("the README's mkhost recipe leaves out the fixture host %s", h)
		}
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

// Every plugin is named where a reader first learns what the suite hands
// out: the README's first paragraph, the chart's description and the first
// paragraph of the chart's README.
func TestEveryPluginNamed(t *testing.T) {
	plugins, err := os.ReadDir("../../plugins")
	if err != nil {
		t.Fatal(err)
	}
	firstParagraph := func(file, after string) string {
		b, err := os.ReadFile(filepath.Join("../..", file))
		if err != nil {
			t.Fatal(err)
		}
		_, text, ok := strings.Cut(string(b), after)
		if !ok {
			t.Fatalf("%s lacks %q", file, after)
		}
		text, _, _ = strings.Cut(strings.TrimLeft(text, "\n"), "\n\n")
		return text
	}
	for _, text := range []struct{ file, text string }{
		{"README.md", firstParagraph("README.md", "# CDI exec plugins\n")},
		{"deploy/helm/cdi-exec-plugins/Chart.yaml", firstParagraph("deploy/helm/cdi-exec-plugins/Chart.yaml", "description: >-\n")},
		{"deploy/helm/cdi-exec-plugins/README.md", firstParagraph("deploy/helm/cdi-exec-plugins/README.md", "# cdi-exec-plugins\n")},
	} {
		for _, p := range plugins {
			if !regexp.MustCompile("(^|[^-`a-z])`?" + regexp.QuoteMeta(p.Name()) + "`?($|[^-a-z])").MatchString(text.text) {
				t.Errorf("the first paragraph of %s does not name the plugin %s:\n%s", text.file, p.Name(), text.text)
			}
		}
	}
}

// One supported Kubernetes range everywhere a user reads it: the DRA mode
// on 1.35 to 1.37, the device-plugin mode on every supported release (and
// older ones). Each place states the range and none states another.
func TestOneKubernetesRange(t *testing.T) {
	forbidden := regexp.MustCompile(`(Kubernetes|DRA[^.]{0,40}) 1\.3[0-4] (and|or) later|older than 1\.3[0-4]\b|1\.3[0-4] to 1\.3[0-9]|1\.35 to 1\.3[0-68-9]\b`)
	space := regexp.MustCompile(`\s+`)
	for _, file := range []string{
		"README.md",
		"docs/operations.md",
		"docs/kubernetes.md",
		"packaging/nfpm.yaml",
		"deploy/helm/cdi-exec-plugins/Chart.yaml",
		"deploy/helm/cdi-exec-plugins/README.md",
		"deploy/helm/cdi-exec-plugins/templates/NOTES.txt",
	} {
		b, err := os.ReadFile(filepath.Join("../..", file))
		if err != nil {
			t.Fatal(err)
		}
		text := space.ReplaceAllString(strings.ReplaceAll(string(b), "\n#", " "), " ")
		if !regexp.MustCompile(`(?i)dra[^.;]{0,80}1\.35 to 1\.37|1\.35 to 1\.37[^.;]{0,40}dra`).MatchString(text) {
			t.Errorf("%s does not say that the DRA mode runs on Kubernetes 1.35 to 1.37", file)
		}
		if !regexp.MustCompile(`device[- ]plugin[^.]{0,200}(every supported release|supported releases|any since|older)`).MatchString(text) &&
			!regexp.MustCompile(`(every supported release|older)[^.]{0,80}device[- ]plugin`).MatchString(text) {
			t.Errorf("%s does not say where the device-plugin mode runs", file)
		}
		if m := forbidden.FindString(text); m != "" {
			t.Errorf("%s states another range: %q", file, m)
		}
	}
}

// docs/operations.md's kubectl exec recipe names what the image and the
// chart have: cdictl's path in the image, the driver's container, the
// pods' instance label.
func TestOperationsKubectlExec(t *testing.T) {
	read := func(file string) string {
		b, err := os.ReadFile(filepath.Join("../..", file))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ops, image, ds := read("docs/operations.md"), read("Containerfile"), read("deploy/30-daemonset.yaml")
	for _, cmd := range []string{"cdictl ls -o table", "cdictl devices -o table"} {
		want := `kubectl -n cdi-exec exec "$pod" -c driver -- /opt/cdi/bin/` + cmd
		if !strings.Contains(ops, want) {
			t.Errorf("docs/operations.md lacks %q", want)
		}
	}
	if !strings.Contains(image, "COPY bin/ /opt/cdi/bin/") {
		t.Error("the image no longer has its binaries, cdictl among them, in /opt/cdi/bin: fix docs/operations.md")
	}
	if !strings.Contains(ds, "      - name: driver\n") || !strings.Contains(ds, "app.kubernetes.io/instance: cdi") || !strings.Contains(ds, "namespace: cdi-exec") {
		t.Error("the driver's container, instance label or namespace changed: fix docs/operations.md")
	}
	for _, v := range []string{"CDI_CONF_DIR", "CDI_STATE_DIR", "CDI_HOST_ROOT"} {
		if !strings.Contains(ds, "- name: "+v) {
			t.Errorf("the driver's container no longer sets %s, which cdictl there needs", v)
		}
	}
	// The worked example's output is cdictl's: each table's header is the
	// one the command prints (its columns without the wide ones, "+..."),
	// and the note on stderr is the one it writes for the image's /host.
	lines := map[string]bool{}
	for line := range strings.Lines(ops) {
		lines[strings.Join(strings.Fields(line), " ")] = true
	}
	report := regexp.MustCompile(`a\.report\("([^"]+)"`)
	for _, src := range []string{"cmd/cdictl/ls.go", "cmd/cdictl/devices.go"} {
		m := report.FindStringSubmatch(read(src))
		if m == nil {
			t.Fatalf("%s prints no table (a.report)", src)
		}
		var cols []string
		for _, c := range strings.Split(m[1], `\t`) {
			if !strings.HasPrefix(c, "+") {
				cols = append(cols, c)
			}
		}
		if header := strings.Join(cols, " "); !lines[header] {
			t.Errorf("docs/operations.md's worked example lacks the table header of %s: %q", src, header)
		}
	}
	note := "no PCI ids database (pci.ids) under %s: showing ids only"
	if !strings.Contains(read("cmd/cdictl/devices.go"), note) {
		t.Errorf("cdictl devices no longer notes %q: fix docs/operations.md", note)
	}
	if want := "cdictl: " + strings.Replace(note, "%s", "/host", 1); !strings.Contains(ops, want) || !strings.Contains(ds, "value: /host\n") {
		t.Errorf("docs/operations.md lacks cdictl's note %q for the driver's CDI_HOST_ROOT, /host", want)
	}
}

// Each plugin's args are listed once, all of them, in the arg table of its
// docs (docs/plugins.md; sriov's in docs/chaining.md) and in the README's
// config reference: the args struct of the plugin is the source.
func TestPluginArgsDocumented(t *testing.T) {
	plugins, err := os.ReadDir("../../plugins")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)`(?:, `([a-z_]+)`)? \\|")
	for _, p := range plugins {
		args, err := manifests.PluginArgs("../../plugins", p.Name())
		if err != nil {
			t.Fatal(err)
		}
		delete(args, "cdi_spec") // every plugin's, documented once for all
		doc, heading := "docs/plugins.md", "## "+p.Name()+"\n"
		if p.Name() == "sriov" {
			doc, heading = "docs/chaining.md", ""
		}
		b, err := os.ReadFile(filepath.Join("../..", doc))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if heading != "" {
			i := strings.Index(text, heading)
			if i < 0 {
				t.Fatalf("%s has no section %q", doc, heading)
			}
			text = text[i+len(heading):]
			if j := strings.Index(text, "\n## "); j >= 0 {
				text = text[:j]
			}
		}
		listed := map[string]int{}
		for _, m := range row.FindAllStringSubmatch(text, -1) {
			for _, name := range m[1:] {
				if _, ok := args[name]; ok {
					listed[name]++
				}
			}
		}
		var bullet string
		if i := strings.Index(string(readme), "- `"+p.Name()+"`: "); i >= 0 {
			bullet = string(readme)[i:]
			if j := strings.Index(bullet, "\n- "); j >= 0 {
				bullet = bullet[:j]
			}
			if j := strings.Index(bullet, "\n\n"); j >= 0 {
				bullet = bullet[:j]
			}
		}
		for name := range args {
			if listed[name] != 1 {
				t.Errorf("%s lists the %s arg %s %d times, want once", doc, p.Name(), name, listed[name])
			}
			if !strings.Contains(bullet, "`"+name+"`") {
				t.Errorf("the README's config reference lacks the %s arg %s", p.Name(), name)
			}
		}
	}
}

// make demo builds only what it runs: the plugins and cdictl, never
// cdi-kubelet-plugin and its Kubernetes modules (most of a cold build).
func TestDemoBuildsOnlyWhatItRuns(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("make is not on PATH: %v", err)
	}
	out, err := exec.Command("make", "--no-print-directory", "-n", "-C", "../..", "demo").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n demo: %v\n%s", err, out)
	}
	var builds []string
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, " build ") {
			builds = append(builds, line)
		}
	}
	if len(builds) != 1 || !strings.HasSuffix(strings.TrimSpace(builds[0]), " ./plugins/... ./cmd/cdictl") {
		t.Errorf("make demo builds %q, want one go build of ./plugins/... ./cmd/cdictl", builds)
	}
	if strings.Contains(string(out), "cdi-kubelet-plugin") || strings.Contains(string(out), "./cmd/...") {
		t.Errorf("make demo builds cdi-kubelet-plugin:\n%s", out)
	}
}

// Every target the Makefile declares phony expands to commands the shell
// can parse: make -n prints them without running them, and sh -n reads
// them without running them. A quote in a target's command that the
// guarded wrapper's echo '...' ends early once broke make bench-scale.
func TestMakeTargetsParse(t *testing.T) {
	for _, tool := range []string{"make", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH: %v", tool, err)
		}
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for line := range strings.Lines(string(mk)) {
		if rest, ok := strings.CutPrefix(line, ".PHONY:"); ok {
			targets = append(targets, strings.Fields(rest)...)
		}
	}
	if len(targets) < 10 {
		t.Fatalf("the Makefile declares %d phony targets: %v", len(targets), targets)
	}
	for _, target := range targets {
		out, err := exec.Command("make", "--no-print-directory", "-n", "-C", "../..", target).CombinedOutput()
		if err != nil {
			t.Errorf("make -n %s: %v\n%s", target, err, out)
			continue
		}
		sh := exec.Command("sh", "-n")
		sh.Stdin = strings.NewReader(string(out))
		if msg, err := sh.CombinedOutput(); err != nil {
			t.Errorf("make %s's commands do not parse: %v: %s\n%s", target, err, msg, out)
		}
	}
}
