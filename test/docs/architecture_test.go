package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// goList returns the module's packages, relative to the module's root,
// each with the packages of the module it imports (its code, not its
// tests), as go list reports them.
func goList(t *testing.T) map[string][]string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("go is not on PATH to list the packages: %v", err)
	}
	mod := exec.Command("go", "list", "-m")
	mod.Dir = repo
	out, err := mod.Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	prefix := strings.TrimSpace(string(out)) + "/"
	list := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	list.Dir = repo
	out, err = list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], prefix) {
			continue
		}
		imports := []string{}
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, prefix); ok {
				imports = append(imports, rel)
			}
		}
		slices.Sort(imports)
		pkgs[strings.TrimPrefix(f[0], prefix)] = imports
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list found no packages of the module; its output:\n%s", out)
	}
	return pkgs
}

// block returns the text of the first fenced block after the heading.
func block(t *testing.T, md, heading string) string {
	t.Helper()
	i := strings.Index(md, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("docs/architecture.md has no heading %q", heading)
	}
	rest := md[i:]
	start := strings.Index(rest, "\n```\n")
	if start < 0 {
		t.Fatalf("docs/architecture.md has no code block under %q", heading)
	}
	rest = rest[start+5:]
	end := strings.Index(rest, "\n```")
	if end < 0 {
		t.Fatalf("the code block under %q in docs/architecture.md is not closed", heading)
	}
	return rest[:end]
}

// layoutDirs returns the directories the layout tree names, relative to
// the repository's root. An entry is a line indented by 0, 2, 4 or 6
// spaces (one level each) that starts with one or more names ending in
// "/", separated by ", "; deeper lines continue the entry above.
func layoutDirs(tree string) []string {
	entry := regexp.MustCompile(`^[A-Za-z0-9_.-][A-Za-z0-9_./-]*/(?:, [A-Za-z0-9_.-][A-Za-z0-9_./-]*/)*(?:\s|$)`)
	var dirs []string
	parents := map[int]string{}
	for line := range strings.Lines(tree) {
		text := strings.TrimLeft(line, " ")
		indent := len(line) - len(text)
		if indent > 6 || indent%2 != 0 {
			continue
		}
		m := entry.FindString(text)
		if m == "" {
			continue
		}
		depth := indent / 2
		for name := range strings.SplitSeq(strings.TrimSpace(m), ", ") {
			dir := parents[depth-1] + name
			dirs = append(dirs, strings.TrimSuffix(dir, "/"))
			parents[depth] = dir
		}
	}
	return dirs
}

// importEntries returns the entries of the import graph, "names ─► what
// they import", each left-hand name with the items of its right-hand side.
// An entry goes on over the lines that follow it without an arrow.
func importEntries(graph string) map[string][]string {
	var joined []string
	for line := range strings.Lines(graph) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.Contains(line, "─►") || len(joined) == 0 {
			joined = append(joined, line)
			continue
		}
		joined[len(joined)-1] += " " + line
	}
	entries := map[string][]string{}
	for _, e := range joined {
		lhs, rhs, ok := strings.Cut(e, "─►")
		if !ok {
			continue
		}
		items := splitOutsideParens(rhs)
		for name := range strings.SplitSeq(lhs, ",") {
			if name = strings.TrimSpace(name); name != "" {
				entries[name] = append(entries[name], items...)
			}
		}
	}
	return entries
}

// splitOutsideParens splits s at the commas that are not inside
// parentheses and returns the first word of each part: the package or
// module it names, without the remark in parentheses after it.
func splitOutsideParens(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	parts = append(parts, s[start:])
	var words []string
	for _, p := range parts {
		if f := strings.Fields(p); len(f) > 0 {
			words = append(words, strings.Trim(f[0], "()"))
		}
	}
	return words
}

// resolve returns the package of the module a short name stands for: the
// one whose path is the name or ends in "/"+name. A name that stands for
// none is another module's (bbolt, client-go); one that stands for
// several is ambiguous.
func resolve(name string, pkgs map[string][]string) ([]string, bool) {
	var found []string
	for p := range pkgs {
		if p == name || strings.HasSuffix(p, "/"+name) {
			found = append(found, p)
		}
	}
	slices.Sort(found)
	return found, len(found) > 0
}

// docs/architecture.md describes the packages as they are: the layout
// names every package's directory and only directories that exist, and
// "Who imports whom" has one entry for every package whose imports within
// the module are exactly those go list reports.
func TestArchitectureMatchesGoList(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repo, "docs/architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	pkgs := goList(t)

	dirs := layoutDirs(block(t, md, "## Layout"))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(repo, d)); err != nil {
			t.Errorf("docs/architecture.md's layout names %s/, which does not exist", d)
		}
	}
	for p := range pkgs {
		if !slices.Contains(dirs, p) {
			t.Errorf("docs/architecture.md's layout has no entry for the package %s (%s/)", p, p)
		}
	}

	entries := importEntries(block(t, md, "### Who imports whom"))
	stated := map[string][]string{}
	for name, items := range entries {
		found, _ := resolve(name, pkgs)
		if len(found) != 1 {
			t.Errorf("docs/architecture.md's import graph has an entry %q, which names %d packages %v, want one", name, len(found), found)
			continue
		}
		p := found[0]
		if _, dup := stated[p]; dup {
			t.Errorf("docs/architecture.md's import graph has two entries for %s", p)
		}
		imports := []string{}
		for _, item := range items {
			found, ok := resolve(item, pkgs)
			if !ok {
				continue // another module's
			}
			if len(found) > 1 {
				t.Errorf("docs/architecture.md's entry for %s names %q, which could be any of %v", p, item, found)
				continue
			}
			if !slices.Contains(imports, found[0]) {
				imports = append(imports, found[0])
			}
		}
		slices.Sort(imports)
		stated[p] = imports
	}
	for p, imports := range pkgs {
		got, ok := stated[p]
		if !ok {
			t.Errorf("docs/architecture.md's import graph has no entry for %s, which imports %v of the module", p, imports)
			continue
		}
		if !slices.Equal(got, imports) {
			t.Errorf("docs/architecture.md says %s imports %v of the module; go list says %v", p, got, imports)
		}
	}
}
