package caller

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/pkg/invoke"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// counting appends "<command> <CDI_VERSION>" to runs beside it on every
// run, supports the versions listed in the file versions beside it, and
// refuses any other with code 1.
const counting = `#!/bin/sh
cat >/dev/null
dir=$(dirname "$0")
echo "$CDI_COMMAND $CDI_VERSION" >>"$dir/runs"
vs=$(cat "$dir/versions")
if [ "$CDI_COMMAND" = VERSION ]; then
  list=$(printf '"%s",' $vs)
  echo "{\"cdiVersion\":\"0.0.2\",\"supportedVersions\":[${list%,}]}"
  exit 0
fi
case " $vs " in
*" $CDI_VERSION "*) echo '{"cdiVersion":"0.0.2","devices":[]}' ;;
*) echo '{"code":1,"msg":"Incompatible CDI version"}'; exit 1 ;;
esac
`

// countingPlugin installs counting with the versions given and returns a
// config for it and a function that returns the runs so far, and forgets
// them.
func countingPlugin(t *testing.T, versions string) (dir string, conf Config, runs func() []string) {
	t.Helper()
	dir = t.TempDir()
	write := func(name, text string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("counting", counting, 0o755)
	write("versions", versions, 0o644)
	conf = Config{File: "c.conf", Type: "thing", Plugin: "counting",
		Raw: []byte(`{"cdiVersion":"0.0.2","name":"c","type":"thing","plugin":"counting"}`)}
	runs = func() []string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(dir, "runs"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, "runs")); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return strings.FieldsFunc(string(data), func(r rune) bool { return r == '\n' })
	}
	return dir, conf, runs
}

func devices(t *testing.T, c Caller, conf Config) {
	t.Helper()
	if _, err := c.Extension(context.Background(), conf, protocol.CmdDevices); err != nil {
		t.Fatal(err)
	}
}

// With a version cache, VERSION runs once per binary; without one, before
// every command.
func TestOneExecPerCall(t *testing.T) {
	dir, conf, runs := countingPlugin(t, "0.0.1 0.0.2")
	for _, tt := range []struct {
		name   string
		caller Caller
		want   []string
	}{
		{"cached", Caller{Path: dir, Timeout: 10 * time.Second}.WithNegotiatedVersions(),
			[]string{"VERSION ", "DEVICES 0.0.2", "DEVICES 0.0.2", "DEVICES 0.0.2"}},
		{"uncached", Caller{Path: dir, Timeout: 10 * time.Second},
			[]string{"VERSION ", "DEVICES 0.0.2", "VERSION ", "DEVICES 0.0.2", "VERSION ", "DEVICES 0.0.2"}},
	} {
		for range 3 {
			devices(t, tt.caller, conf)
		}
		if got := runs(); !slices.Equal(got, tt.want) {
			t.Errorf("%s: runs %q, want %q", tt.name, got, tt.want)
		}
	}
}

// A binary replaced by another (a new file), or changed in place (size,
// modification time), is asked VERSION again.
func TestVersionAgainForANewBinary(t *testing.T) {
	dir, conf, runs := countingPlugin(t, "0.0.1 0.0.2")
	c := Caller{Path: dir, Timeout: 10 * time.Second}.WithNegotiatedVersions()
	devices(t, c, conf)
	devices(t, c, conf)
	if got := runs(); !slices.Equal(got, []string{"VERSION ", "DEVICES 0.0.2", "DEVICES 0.0.2"}) {
		t.Fatalf("runs %q", got)
	}
	bin := filepath.Join(dir, "counting")
	// A new file renamed over the old one, as a package upgrade does.
	if err := os.WriteFile(bin+".new", []byte(counting+"# v2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
	devices(t, c, conf)
	devices(t, c, conf)
	if got := runs(); !slices.Equal(got, []string{"VERSION ", "DEVICES 0.0.2", "DEVICES 0.0.2"}) {
		t.Fatalf("runs after a replaced binary %q", got)
	}
	// The same file, rewritten with another modification time.
	if err := os.WriteFile(bin, []byte(counting+"# v3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(bin, later, later); err != nil {
		t.Fatal(err)
	}
	devices(t, c, conf)
	if got := runs(); !slices.Equal(got, []string{"VERSION ", "DEVICES 0.0.2"}) {
		t.Fatalf("runs after a binary changed in place %q", got)
	}
}

// A plugin that refuses the cached version (code 1) is asked VERSION
// again and the command runs once more; a refusal of a freshly
// negotiated version is the answer.
func TestVersionAgainAfterCode1(t *testing.T) {
	dir, conf, runs := countingPlugin(t, "0.0.1 0.0.2")
	c := Caller{Path: dir, Timeout: 10 * time.Second}.WithNegotiatedVersions()
	devices(t, c, conf)
	runs()
	// Same binary, other answers: it no longer speaks 0.0.2.
	if err := os.WriteFile(filepath.Join(dir, "versions"), []byte("0.0.1"), 0o644); err != nil {
		t.Fatal(err)
	}
	devices(t, c, conf)
	if got, want := runs(), []string{"DEVICES 0.0.2", "VERSION ", "DEVICES 0.0.1"}; !slices.Equal(got, want) {
		t.Fatalf("runs %q, want %q", got, want)
	}
	devices(t, c, conf)
	if got, want := runs(), []string{"DEVICES 0.0.1"}; !slices.Equal(got, want) {
		t.Fatalf("runs after the retry %q, want %q", got, want)
	}

	// A plugin that lists a version and refuses it: one retry, then code 1.
	dir, conf, runs = countingPlugin(t, "0.0.2")
	c = Caller{Path: dir, Timeout: 10 * time.Second}.WithNegotiatedVersions()
	devices(t, c, conf)
	runs()
	if err := os.WriteFile(filepath.Join(dir, "counting"), []byte(strings.Replace(counting, `*" $CDI_VERSION "*)`, `*" never "*)`, 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := c.Extension(context.Background(), conf, protocol.CmdDevices)
	var pe *invoke.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeIncompatibleVersion {
		t.Fatalf("DEVICES: %v, want code 1", err)
	}
	if got, want := runs(), []string{"VERSION ", "DEVICES 0.0.2"}; !slices.Equal(got, want) {
		t.Fatalf("runs %q, want %q", got, want)
	}
}

// One cache serves concurrent calls.
func TestVersionCacheConcurrent(t *testing.T) {
	dir, conf, runs := countingPlugin(t, "0.0.1 0.0.2")
	c := Caller{Path: dir, Timeout: 10 * time.Second}.WithNegotiatedVersions()
	devices(t, c, conf)
	runs()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := c.Extension(context.Background(), conf, protocol.CmdDevices); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got := runs()
	if len(got) != 8 || slices.Contains(got, "VERSION ") {
		t.Fatalf("runs %q, want 8 DEVICES and no VERSION", got)
	}
}
