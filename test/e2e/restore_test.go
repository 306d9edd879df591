package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/pkg/protocol"
)

// withSpec returns conf with a cdi_spec of kind in dir among its args.
func withSpec(t *testing.T, conf, kind, dir string) string {
	t.Helper()
	out, err := protocol.EditArgs([]byte(conf), func(args map[string]json.RawMessage) (bool, error) {
		args["cdi_spec"] = json.RawMessage(`{"kind":"` + kind + `","dir":"` + dir + `"}`)
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// onlyFile returns the one spec file of a request-id in dir and its
// content, failing unless there is exactly one.
func onlyFile(t *testing.T, dir, kind, id string) (string, []byte) {
	t.Helper()
	prefix := strings.ReplaceAll(kind, "/", "-") + "_" + id + "_"
	files, err := filepath.Glob(filepath.Join(dir, prefix+"*.json"))
	if err != nil || len(files) != 1 {
		t.Fatalf("spec files of %s: %v, %v", id, files, err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	return files[0], b
}

// A pinned replay ADD writes the request's spec file again when it is
// missing, the same file with the same content, for every plugin: the
// Kubernetes modes and `cdictl specs --restore` put spec files back so.
func TestPinnedReplayRewritesSpec(t *testing.T) {
	for _, tg := range pinTargets() {
		t.Run(tg.name, func(t *testing.T) {
			n := newPinNode(t, tg)
			dir := filepath.Join(t.TempDir(), "cdi")
			conf := withSpec(t, tg.conf, "example.com/"+tg.typ, dir)
			keys := tg.keys[0] + "," + tg.keys[1]
			n.want(n.add(conf, "a", 2, keys), tg.keys[0], tg.keys[1])
			path, want := onlyFile(t, dir, "example.com/"+tg.typ, "a")
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			n.want(n.add(conf, "a", 2, keys), tg.keys[0], tg.keys[1])
			if p, got := onlyFile(t, dir, "example.com/"+tg.typ, "a"); p != path || !bytes.Equal(got, want) {
				t.Errorf("the replay wrote %s:\n%s\nwant %s:\n%s", p, got, path, want)
			}
			// The whole directory gone: made again.
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			n.want(n.add(conf, "a", 2, keys), tg.keys[0], tg.keys[1])
			if p, got := onlyFile(t, dir, "example.com/"+tg.typ, "a"); p != path || !bytes.Equal(got, want) {
				t.Errorf("after the directory went, the replay wrote %s:\n%s", p, got)
			}
		})
	}
}

// restoreAnswer is `cdictl specs --restore -o json`.
type restoreAnswer struct {
	Restored []struct {
		File, Type, Plugin, RequestID, Spec string
		Error                               *struct{ Code int }
	}
}

// cdictl specs --restore writes back the spec files that are missing,
// the same as they were, leaves alone those that are there, writes
// nothing for ids no store holds, and fails, naming it, for a store it
// cannot read while still restoring the others.
func TestCdictlSpecsRestore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cdi")
	confs := map[string]string{
		"gpu.d/drm.conf":         withSpec(t, ctlConfs["gpu.d/drm.conf"], "example.com/gpu", dir),
		"tty.d/generic-tty.conf": withSpec(t, ctlConfs["tty.d/generic-tty.conf"], "example.com/tty", dir),
	}
	n := newCtlNode(t, ctlHost(), confs)
	for _, add := range [][]string{{"--id", "a", "tty:2"}, {"--id", "b", "gpu:1"}, {"--id", "c", "tty:1"}, {"--id", "d", "gpu:1,tty:1"}} {
		if r := n.ctl(append([]string{"add", "-o", "json"}, add...)...); r.status != 0 {
			t.Fatalf("add %v: %s%s", add, r.stdout, r.stderr)
		}
	}
	type file struct {
		path    string
		content []byte
	}
	specs := map[string]file{}
	for _, f := range []struct{ kind, id string }{{"example.com/tty", "a"}, {"example.com/gpu", "b"}, {"example.com/tty", "c"}, {"example.com/gpu", "d"}, {"example.com/tty", "d"}} {
		p, b := onlyFile(t, dir, f.kind, f.id)
		specs[filepath.Base(p)] = file{p, b}
	}
	// a's, b's and d's tty file go; c's and d's gpu file stay.
	var gone []string
	for name, f := range specs {
		if strings.Contains(name, "_c_") || strings.HasPrefix(name, "example.com-gpu_d_") {
			continue
		}
		if err := os.Remove(f.path); err != nil {
			t.Fatal(err)
		}
		gone = append(gone, f.path)
	}
	kept := map[string]unix.Stat_t{}
	for _, f := range specs {
		if !slices.Contains(gone, f.path) {
			var st unix.Stat_t
			if err := unix.Stat(f.path, &st); err != nil {
				t.Fatal(err)
			}
			kept[f.path] = st
		}
	}

	r := n.ctl("specs", "--restore", "-o", "json")
	if r.status != 0 {
		t.Fatalf("specs --restore: status %d, %s%s", r.status, r.stdout, r.stderr)
	}
	var ans restoreAnswer
	r.json(t, &ans)
	var got []string
	for _, e := range ans.Restored {
		if e.Error != nil {
			t.Errorf("%s: %+v", e.RequestID, e.Error)
		}
		got = append(got, e.Spec)
	}
	slices.Sort(got)
	slices.Sort(gone)
	if !slices.Equal(got, gone) {
		t.Errorf("restored %v, want %v", got, gone)
	}
	for name, f := range specs {
		b, err := os.ReadFile(f.path)
		if err != nil || !bytes.Equal(b, f.content) {
			t.Errorf("%s after the restore: %v\n%s\nwant\n%s", name, err, b, f.content)
		}
	}
	for p, was := range kept { // not rewritten
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil || st.Ino != was.Ino || st.Mtim != was.Mtim {
			t.Errorf("%s was rewritten or removed: %v", p, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != len(specs) {
		t.Errorf("the spec directory holds %d entries, want %d: %v", len(entries), len(specs), err)
	}

	// Nothing missing: nothing done, exit 0.
	r = n.ctl("specs", "--restore", "-o", "json")
	ans = restoreAnswer{}
	r.json(t, &ans)
	if r.status != 0 || len(ans.Restored) != 0 || !strings.Contains(r.stderr, "no spec file was missing") {
		t.Errorf("a second restore: status %d, %s%s", r.status, r.stdout, r.stderr)
	}

	// A store that cannot be read fails the command, which still restores
	// the rest.
	aFile, _ := onlyFile(t, dir, "example.com/tty", "a")
	if err := os.Remove(aFile); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(n.state, "drm.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil { // an empty store is damage
		t.Fatal(err)
	}
	r = n.ctl("specs", "--restore", "-o", "json")
	ans = restoreAnswer{}
	r.json(t, &ans)
	if r.status != 1 {
		t.Errorf("restore with a damaged store: status %d, %s%s", r.status, r.stdout, r.stderr)
	}
	var storeFailed bool
	for _, e := range ans.Restored {
		storeFailed = storeFailed || e.Plugin == "drm" && e.Error != nil && e.Error.Code == 106
	}
	if !storeFailed {
		t.Errorf("the damaged store is not named: %s", r.stdout)
	}
	if _, err := os.Stat(aFile); err != nil {
		t.Errorf("a's tty file was not restored beside the damaged store: %v", err)
	}
}
