package main

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// helpOf runs `cdictl <name> --help` and returns what it printed.
func helpOf(t *testing.T, name string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if st := run([]string{name, "--help"}, env{getenv: func(string) string { return "" }, stdout: &out, stderr: &errOut}); st != exitOK || errOut.Len() != 0 {
		t.Fatalf("%s --help: status %d\n%s", name, st, errOut.String())
	}
	return out.String()
}

var (
	// helpFlag finds a flag line of --help: the flag and its one-letter
	// form, if any.
	helpFlag = regexp.MustCompile(`(?m)^  (--?[a-z][a-z-]*)(?:, (-[a-z]))?`)
	// docFlag finds flags in prose and examples: a dash at the start of a
	// word (so "read-only" is not one).
	docFlag = regexp.MustCompile("(?:^|[\\s`(\\[|])(--?[a-z][a-z-]*)")
)

// The docs and README spell every flag and synopsis the way --help does,
// and name no flag that does not exist.
func TestHelpMatchesDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cdictl.md")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	known := []string{"--help", "-h", "--version"} // --version: cdictl's own, before any command
	for _, c := range commands() {
		help := helpOf(t, c.name)
		usage, _, _ := strings.Cut(strings.TrimPrefix(help, "Usage: "), "\n")
		if !strings.Contains(string(doc), "\n    "+strings.TrimSpace(usage)+"\n") {
			t.Errorf("docs/cdictl.md lacks the synopsis line %q", usage)
		}
		for _, m := range helpFlag.FindAllStringSubmatch(help, -1) {
			for _, f := range m[1:] {
				if f == "" {
					continue
				}
				if len(strings.TrimLeft(f, "-")) > 1 && !strings.HasPrefix(f, "--") {
					t.Errorf("%s --help spells %s with one dash", c.name, f)
				}
				if !strings.Contains(string(doc), "`"+f) && !strings.Contains(string(doc), " "+f+" ") {
					t.Errorf("docs/cdictl.md does not mention %s of %s", f, c.name)
				}
				known = append(known, f)
			}
		}
	}
	var lines []string
	for l := range strings.Lines(string(readme)) {
		if strings.Contains(l, "cdictl ") {
			lines = append(lines, l)
		}
	}
	for name, text := range map[string]string{"docs/cdictl.md": string(doc), "README.md": strings.Join(lines, "")} {
		for _, m := range docFlag.FindAllStringSubmatch(text, -1) {
			if !slices.Contains(known, m[1]) {
				t.Errorf("%s names %s, which no command's --help lists", name, m[1])
			}
		}
	}
}
