// Package docs checks that the repository stands on its own: every
// document and anchor it cites exists, and nothing cites material outside
// the repository.
package docs

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const repo = "../.."

// files returns the repository's text files, relative to repo, with their
// contents.
func files(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, p)
		if d.IsDir() {
			switch rel {
			case ".git", "bin", ".cache":
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.Contains(b, []byte{0}) { // text only
			out[filepath.ToSlash(rel)] = b
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// anchors returns the GitHub anchors of a Markdown file's headings: lower
// case, punctuation other than "-" and "_" dropped, spaces as hyphens, and
// -1, -2, ... for repeats.
func anchors(md []byte) map[string]bool {
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	fence := false
	sc := bufio.NewScanner(bytes.NewReader(md))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		slug := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
		s := slug
		for i := 1; out[s]; i++ {
			s = slug + "-" + strconv.Itoa(i)
		}
		out[s] = true
	}
	return out
}

func TestAnchorsResolve(t *testing.T) {
	all := files(t)
	cited := regexp.MustCompile(`docs/([A-Za-z0-9_-]+\.md)(#[a-z0-9_-]+)?`)
	local := regexp.MustCompile(`\]\(#([a-z0-9_-]+)\)`)
	for name, b := range all {
		for _, m := range cited.FindAllSubmatch(b, -1) {
			doc := "docs/" + string(m[1])
			target, ok := all[doc]
			if !ok {
				t.Errorf("%s cites %s, which does not exist", name, doc)
				continue
			}
			if a := strings.TrimPrefix(string(m[2]), "#"); a != "" && !anchors(target)[a] {
				t.Errorf("%s cites %s#%s: no such heading", name, doc, a)
			}
		}
		if !strings.HasSuffix(name, ".md") {
			continue
		}
		own := anchors(b)
		for _, m := range local.FindAllSubmatch(b, -1) {
			if !own[string(m[1])] {
				t.Errorf("%s links to #%s: no such heading", name, m[1])
			}
		}
	}
}

// Nothing outside .ci/ refers to the guidance that lives beside the
// repository; the protocol reference is docs/protocol.md.
func TestNothingCitesOutside(t *testing.T) {
	outside := regexp.MustCompile(`shared` + `/|RUL` + `INGS`)
	for name, b := range files(t) {
		if strings.HasPrefix(name, ".ci/") {
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			if outside.MatchString(line) {
				t.Errorf("%s:%d cites material outside the repository: %s", name, i+1, strings.TrimSpace(line))
			}
		}
	}
}

func TestAnchorSlugs(t *testing.T) {
	md := []byte("# Title\n## Extension: GC\n## Error codes\n```\n# not a heading\n```\n## Error codes\n### `CDI_REQUEST_DEVICES` and more\n")
	got := anchors(md)
	for _, a := range []string{"title", "extension-gc", "error-codes", "error-codes-1", "cdi_request_devices-and-more"} {
		if !got[a] {
			t.Errorf("missing %q in %v", a, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a line in a code block counted as a heading")
	}
}

// No build output is committed: git tracks no ELF file (a binary built
// inside a plugin's folder belongs in .gitignore). Outside a git checkout
// (a source tarball) there is nothing to ask.
func TestNoCommittedBinaries(t *testing.T) {
	out, err := exec.Command("git", "-C", repo, "-c", "safe.directory=*", "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout (git ls-files: %v): nothing is committed to check", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		f, err := os.Open(filepath.Join(repo, name))
		if err != nil {
			continue // deleted in the work tree, or a submodule
		}
		head := make([]byte, 4)
		n, _ := f.Read(head)
		f.Close()
		if n == 4 && bytes.Equal(head, []byte("\x7fELF")) {
			t.Errorf("%s is a committed ELF binary: remove it from git and list it in .gitignore", name)
		}
	}
}
