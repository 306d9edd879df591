package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// events is a run of two packages as `go test -json` prints it: a pass, a
// skip with its reason, a failure with its output, and a package without
// tests.
const events = `{"Action":"start","Package":"example.com/a"}
{"Action":"run","Package":"example.com/a","Test":"TestPass"}
{"Action":"output","Package":"example.com/a","Test":"TestPass","Output":"=== RUN   TestPass\n"}
{"Action":"output","Package":"example.com/a","Test":"TestPass","Output":"    a_test.go:9: quiet\n"}
{"Action":"pass","Package":"example.com/a","Test":"TestPass","Elapsed":0}
{"Action":"run","Package":"example.com/a","Test":"TestDeb"}
{"Action":"output","Package":"example.com/a","Test":"TestDeb","Output":"=== RUN   TestDeb\n"}
{"Action":"output","Package":"example.com/a","Test":"TestDeb","Output":"    a_test.go:20: CDI_TEST_DEB is not set: make test-deb runs it\n"}
{"Action":"output","Package":"example.com/a","Test":"TestDeb","Output":"--- SKIP: TestDeb (0.00s)\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestDeb","Elapsed":0}
{"Action":"run","Package":"example.com/a","Test":"TestPodman/run"}
{"Action":"output","Package":"example.com/a","Test":"TestPodman/run","Output":"    a_test.go:30: podman cannot run a plain container here\n"}
{"Action":"output","Package":"example.com/a","Test":"TestPodman/run","Output":"    --- SKIP: TestPodman/run (0.00s)\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestPodman/run","Elapsed":0}
{"Action":"pass","Package":"example.com/a","Test":"TestPodman","Elapsed":0}
{"Action":"pass","Package":"example.com/a","Elapsed":0.5}
{"Action":"run","Package":"example.com/b","Test":"TestBroken"}
{"Action":"output","Package":"example.com/b","Test":"TestBroken","Output":"    b_test.go:5: the store was written to\n"}
{"Action":"fail","Package":"example.com/b","Test":"TestBroken","Elapsed":0}
{"Action":"output","Package":"example.com/b","Output":"FAIL\n"}
{"Action":"fail","Package":"example.com/b","Elapsed":0.1}
{"Action":"skip","Package":"example.com/c","Elapsed":0}
`

func TestReport(t *testing.T) {
	deb := allowed{pkg: "example.com/a", test: "TestDeb", condition: "CDI_TEST_DEB is not set", why: "make test-deb runs it"}
	tests := []struct {
		name   string
		stream bool
		allow  []allowed
		ci     bool
		ok     bool
		want   []string // lines the report prints
		absent []string
	}{
		{"outside CI every skip is shown and accepted", false, nil, false, true,
			[]string{"2 passed, 2 skipped, 1 failed",
				"--- SKIP: example.com/a TestDeb: a_test.go:20: CDI_TEST_DEB is not set: make test-deb runs it",
				"--- SKIP: example.com/a TestPodman/run: a_test.go:30: podman cannot run a plain container here",
				"b_test.go:5: the store was written to", "failed:  example.com/b TestBroken", "FAIL\texample.com/b"},
			[]string{"quiet", "fails CI", "example.com/c"}},
		{"under CI a skip off the allowlist fails", false, []allowed{deb}, true, false,
			[]string{"TestDeb: a_test.go:20: CDI_TEST_DEB is not set: make test-deb runs it [allowed: make test-deb runs it]",
				"TestPodman/run: a_test.go:30: podman cannot run a plain container here [not on the allowlist: fails CI]"},
			nil},
		{"the entry's condition must be the reason", false, []allowed{{pkg: "example.com/a", test: "TestDeb", condition: "dpkg is not installed", why: "x"}}, true, false,
			[]string{"TestDeb: a_test.go:20: CDI_TEST_DEB is not set: make test-deb runs it [not on the allowlist: fails CI]"},
			nil},
		{"streamed, every line shows and skips keep their reasons", true, nil, true, false,
			[]string{"quiet", "=== RUN   TestPass",
				"skipped: example.com/a TestDeb: a_test.go:20: CDI_TEST_DEB is not set: make test-deb runs it [not on the allowlist: fails CI]"},
			nil},
		{"under CI with every skip allowed", false, []allowed{deb, {pkg: "example.com/a", test: "TestPodman/run", condition: "podman cannot run", why: "y"}}, true, true,
			nil, []string{"fails CI"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			r := newReport(&b, tt.stream)
			if err := r.read(strings.NewReader(events)); err != nil {
				t.Fatal(err)
			}
			if ok := r.summary(tt.allow, tt.ci); ok != tt.ok {
				t.Errorf("summary = %v, want %v", ok, tt.ok)
			}
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("report lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tt.absent {
				if strings.Contains(b.String(), w) {
					t.Errorf("report shows %q:\n%s", w, b.String())
				}
			}
		})
	}
}

func TestParseAllowlist(t *testing.T) {
	got, err := parseAllowlist("f", "# comment\n\nexample.com/a TestDeb | CDI_TEST_DEB is not set | make test-deb runs it\n")
	if err != nil || len(got) != 1 || got[0] != (allowed{"example.com/a", "TestDeb", "CDI_TEST_DEB is not set", "make test-deb runs it"}) {
		t.Fatalf("parseAllowlist = %+v %v", got, err)
	}
	for _, bad := range []string{
		"example.com/a TestDeb | CDI_TEST_DEB is not set",      // no why
		"example.com/a TestDeb |  | make test-deb runs it",     // no condition
		"TestDeb | CDI_TEST_DEB is not set | make test-deb",    // no package
		"example.com/a TestDeb | a | b | c",                    // too many fields
		"example.com/a TestDeb extra | a condition | a reason", // not one test
	} {
		if _, err := parseAllowlist("f", bad); err == nil || !strings.Contains(err.Error(), "f:1:") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// The repository's own allowlist parses, and every test it names exists.
func TestRepositoryAllowlist(t *testing.T) {
	path := filepath.Join("..", "skips.allow")
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	allow, err := readAllowlist(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range allow {
		dir := filepath.Join("..", "..", strings.TrimPrefix(a.pkg, "github.com/cdi-exec/plugins/"))
		files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
		found := false
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			found = found || strings.Contains(string(b), "func "+strings.Split(a.test, "/")[0]+"(") && strings.Contains(string(b), a.condition)
		}
		if !found {
			t.Errorf("%s %s: no test of that name in %s skips with %q", a.pkg, a.test, dir, a.condition)
		}
	}
}
