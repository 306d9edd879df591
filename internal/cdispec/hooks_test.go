package cdispec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"
)

// CheckHooks refuses a hook whose program, or a directory on the way to
// it from the host's /, belongs to another user than root or is writable
// by its group or others, following links within the host root; it
// passes root's own, a program that is not there (CheckHost's to report)
// and configs without hooks.
func TestCheckHooks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to root and to another user (chown)")
	}
	const nobody = 65534
	for _, tt := range []struct {
		name string
		path string                          // the hook's program
		host func(t *testing.T, root string) // changes to the host of /usr/bin/hook, all root's, 0755
		want string                          // in the error; "" for none
	}{
		{name: "root's alone", path: "/usr/bin/hook"},
		{name: "not there", path: "/usr/bin/missing"},
		{name: "program group-writable", path: "/usr/bin/hook",
			host: chmod("usr/bin/hook", 0o775), want: "hook createContainer /usr/bin/hook: the program is writable by its group or others (mode 0775)"},
		{name: "program world-writable", path: "/usr/bin/hook",
			host: chmod("usr/bin/hook", 0o757), want: "the program is writable by its group or others (mode 0757)"},
		{name: "program another user's", path: "/usr/bin/hook",
			host: chown("usr/bin/hook", nobody), want: "the program is owned by uid 65534, not root"},
		{name: "parent group-writable", path: "/usr/bin/hook",
			host: chmod("usr/bin", 0o775), want: "the directory /usr/bin is writable by its group or others (mode 0775)"},
		{name: "grandparent another user's", path: "/usr/bin/hook",
			host: chown("usr", nobody), want: "the directory /usr is owned by uid 65534, not root"},
		{name: "the host's / world-writable", path: "/usr/bin/hook",
			host: chmod("", 0o777), want: "the directory / is writable by its group or others"},
		{name: "sticky like /tmp", path: "/tmp/hook",
			host: func(t *testing.T, root string) {
				mkdir(t, root, "tmp", 0o777|os.ModeSticky)
				program(t, root, "tmp/hook")
			}, want: "the directory /tmp is writable by its group or others (mode 0777)"},
		{name: "through a link to a safe program", path: "/bin/hook",
			host: func(t *testing.T, root string) { symlink(t, root, "usr/bin", "bin") }},
		{name: "through a relative link into an unsafe directory", path: "/usr/bin/hook2",
			host: func(t *testing.T, root string) {
				mkdir(t, root, "opt", 0o777)
				program(t, root, "opt/hook2")
				symlink(t, root, "../../opt/hook2", "usr/bin/hook2")
			}, want: "the directory /opt is writable by its group or others"},
		{name: "through an absolute link to another user's program", path: "/usr/bin/hook2",
			host: func(t *testing.T, root string) {
				mkdir(t, root, "opt", 0o755)
				program(t, root, "opt/hook2")
				chown("opt/hook2", nobody)(t, root)
				symlink(t, root, "/opt/hook2", "usr/bin/hook2")
			}, want: "the program is owned by uid 65534, not root"},
		{name: "a link loop", path: "/usr/bin/loop",
			host: func(t *testing.T, root string) { symlink(t, root, "loop", "usr/bin/loop") }, want: "more than 40 symbolic links"},
		{name: "relative path", path: "hook", want: "the program's path is not absolute"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The host root itself sits in a world-writable /tmp: only
			// what is under it is the host's.
			root := t.TempDir()
			if err := os.Chmod(root, 0o755); err != nil {
				t.Fatal(err)
			}
			mkdir(t, root, "usr", 0o755)
			mkdir(t, root, "usr/bin", 0o755)
			program(t, root, "usr/bin/hook")
			if tt.host != nil {
				tt.host(t, root)
			}
			c := &Config{ContainerEdits: &Edits{Hooks: []*specs.Hook{
				{HookName: "createRuntime", Path: "/usr/bin/hook"},
				{HookName: "createContainer", Path: tt.path},
			}}}
			if tt.path == "/usr/bin/hook" {
				c.ContainerEdits.Hooks = c.ContainerEdits.Hooks[1:]
			}
			err := c.CheckHooks(root)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want one saying %q", err, tt.want)
			}
		})
	}
	for _, c := range []*Config{nil, {}, {ContainerEdits: &Edits{Env: []string{"A=b"}}}} {
		if err := c.CheckHooks("/nonexistent"); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func mkdir(t *testing.T, root, rel string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	chmod(rel, mode)(t, root)
}

// program makes an executable of root's, 0755.
func program(t *testing.T, root, rel string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, rel), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	chmod(rel, 0o755)(t, root)
}

func symlink(t *testing.T, root, target, rel string) {
	t.Helper()
	if err := os.Symlink(target, filepath.Join(root, rel)); err != nil {
		t.Fatal(err)
	}
}

func chmod(rel string, mode os.FileMode) func(*testing.T, string) {
	return func(t *testing.T, root string) {
		t.Helper()
		if err := os.Chmod(filepath.Join(root, rel), mode); err != nil {
			t.Fatal(err)
		}
	}
}

func chown(rel string, uid int) func(*testing.T, string) {
	return func(t *testing.T, root string) {
		t.Helper()
		if err := os.Lchown(filepath.Join(root, rel), uid, -1); err != nil {
			t.Fatal(err)
		}
	}
}
