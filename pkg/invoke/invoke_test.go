package invoke

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// script writes an executable shell script plugin into dir.
func script(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestFind(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	script(t, b, "p", "true")
	if err := os.WriteFile(filepath.Join(a, "p"), nil, 0o644); err != nil { // not executable
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(a, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Find("p", a+":"+b)
	if err != nil || got != filepath.Join(b, "p") {
		t.Fatalf("Find = %q, %v", got, err)
	}
	for _, name := range []string{"", "../p", "/bin/sh", "a/p", ".", ".."} {
		if _, err := Find(name, b); err == nil {
			t.Errorf("Find(%q) accepted", name)
		}
	}
	if _, err := Find("d", a); !errors.Is(err, ErrNotFound) {
		t.Errorf("directory found: %v", err)
	}
	if _, err := Find("missing", a+":"+b); !errors.Is(err, ErrNotFound) || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("err = %v", err)
	}
	// A misspelt name is named with the executable meant; a file that is
	// not executable, or a directory, is never suggested.
	script(t, b, "generic-tty", "true")
	if err := os.WriteFile(filepath.Join(a, "sriov"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(a, "drm-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"generic-ty":  `; did you mean "generic-tty"?`,
		"Generic-tty": `; did you mean "generic-tty"?`,
		"pp":          `; did you mean "p"?`,
		"sriv":        "",
		"drm-dirs":    "",
	} {
		_, err := Find(name, a+":"+b)
		if !errors.Is(err, ErrNotFound) || want != "" && !strings.HasSuffix(err.Error(), want) || want == "" && strings.Contains(err.Error(), "did you mean") {
			t.Errorf("Find(%q): %v, want ending %q", name, err, want)
		}
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	script(t, dir, "ok", `cat >/dev/null; printf '{"cdiVersion":"0.0.2","devices":["/dev/x"],"req":"%s"}' "$CDI_REQUEST"`)
	script(t, dir, "silent", `cat >/dev/null`)
	script(t, dir, "fail", `echo '{"cdiVersion":"0.0.2","code":103,"msg":"Insufficient free resources","details":"none"}'; exit 1`)
	script(t, dir, "prose", `echo '{"cdiVersion":"0.0.2","error":5,"message":"Unknown request ID"}'`)
	script(t, dir, "crash", `echo oops >&2; exit 3`)
	script(t, dir, "garbage", `echo hello`)
	script(t, dir, "two", `echo '{}{}'`)
	script(t, dir, "hang", `sleep 600`)
	script(t, dir, "orphan", `sleep 600 & echo '{"cdiVersion":"0.0.2"}'`)
	script(t, dir, "stdin", `cat`)

	tests := []struct {
		plugin string
		check  func(*Reply, error) string
	}{
		{"ok", func(r *Reply, err error) string {
			if err != nil || !strings.Contains(string(r.Object["req"]), "gpu:1") {
				return "want success with the overridden env"
			}
			return ""
		}},
		{"silent", func(r *Reply, err error) string {
			if err != nil || r.Object != nil {
				return "want an empty success"
			}
			return ""
		}},
		{"fail", func(_ *Reply, err error) string {
			var e *Error
			if !errors.As(err, &e) || e.Code != 103 || e.Details != "none" || e.Status != 1 {
				return "want protocol error 103"
			}
			return ""
		}},
		{"prose", func(_ *Reply, err error) string {
			var e *Error
			if !errors.As(err, &e) || e.Code != 5 || e.Msg != "Unknown request ID" || e.Status != 0 {
				return "want protocol error 5 from the error/message spelling"
			}
			return ""
		}},
		{"crash", func(_ *Reply, err error) string {
			var e *RunError
			if !errors.As(err, &e) || e.Kind != KindCrash || !strings.Contains(e.Stderr, "oops") {
				return "want a crash with stderr"
			}
			return ""
		}},
		{"garbage", kind(KindGarbage)},
		{"two", kind(KindGarbage)},
		{"hang", kind(KindTimeout)},
		{"stdin", func(r *Reply, err error) string {
			if err != nil || string(r.Object["cdiVersion"]) != `"0.0.1"` {
				return "want the config echoed back"
			}
			return ""
		}},
		{"missing", kind(KindExec)},
	}
	for _, tt := range tests {
		t.Run(tt.plugin, func(t *testing.T) {
			// A script answers in milliseconds; only the hanging one
			// needs its deadline to pass, and waits for it.
			timeout := 20 * time.Second
			if tt.plugin == "hang" {
				timeout = 200 * time.Millisecond
			}
			r, err := Run(context.Background(), Call{
				Plugin: tt.plugin, Path: dir, Env: []string{"CDI_REQUEST=gpu:1"},
				Config: []byte(`{"cdiVersion":"0.0.1"}`), Timeout: timeout,
			})
			if msg := tt.check(r, err); msg != "" {
				t.Fatalf("%s; got %+v, %v", msg, r, err)
			}
		})
	}
}

// A plugin that answers and exits while something it started keeps its
// stdout open has answered: with the default timeout, the answer is
// decoded once the wait delay has closed the pipe, and the run succeeds.
func TestRunOrphanHoldingStdout(t *testing.T) {
	dir := t.TempDir()
	// Each orphan records its pid, so the test leaves no process behind.
	script(t, dir, "orphan", `cat >/dev/null; sleep 60 & echo $! >>"$PIDS"; echo '{"cdiVersion":"0.0.2","devices":["/dev/x"]}'`)
	script(t, dir, "orphanfail", `cat >/dev/null; sleep 60 & echo $! >>"$PIDS"; echo '{"cdiVersion":"0.0.2","code":103,"msg":"Insufficient free resources"}'; exit 1`)
	pids := filepath.Join(dir, "pids")
	t.Setenv("PIDS", pids)
	t.Cleanup(func() {
		b, _ := os.ReadFile(pids)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	r, err := Run(context.Background(), Call{Plugin: "orphan", Path: dir, Config: []byte(`{}`)})
	if err != nil || string(r.Object["devices"]) != `["/dev/x"]` {
		t.Fatalf("want the answer decoded; got %+v, %v", r, err)
	}
	_, err = Run(context.Background(), Call{Plugin: "orphanfail", Path: dir, Config: []byte(`{}`)})
	var e *Error
	if !errors.As(err, &e) || e.Code != 103 || e.Status != 1 {
		t.Fatalf("want protocol error 103 with status 1; got %v", err)
	}
}

func kind(k string) func(*Reply, error) string {
	return func(_ *Reply, err error) string {
		var e *RunError
		if !errors.As(err, &e) || e.Kind != k {
			return "want run error " + k
		}
		return ""
	}
}

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"A=1", "CDI_VERSION=9", "B=2"}, []string{"CDI_VERSION=0.0.2"})
	if strings.Join(got, " ") != "A=1 B=2 CDI_VERSION=0.0.2" {
		t.Fatal(got)
	}
}

// A plugin learns where it was found through CDI_PATH, so that its own
// delegates come from the same directories; a CDI_PATH the call sets wins.
func TestRunPassesPath(t *testing.T) {
	dir := t.TempDir()
	script(t, dir, "path", `cat >/dev/null; printf '{"cdiVersion":"0.0.2","path":"%s"}' "$CDI_PATH"`)
	t.Setenv("CDI_PATH", "/elsewhere")
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{nil, dir},
		{[]string{"CDI_PATH=/set:" + dir}, "/set:" + dir},
	} {
		r, err := Run(context.Background(), Call{Plugin: "path", Path: dir, Env: tt.env, Config: []byte(`{}`)})
		if err != nil || string(r.Object["path"]) != `"`+tt.want+`"` {
			t.Fatalf("env %v: the plugin sees CDI_PATH %s (%v), want %s", tt.env, r.Object["path"], err, tt.want)
		}
	}
}
