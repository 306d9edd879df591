package kubelettest

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// Host lays out the fixture host h under root, writes the plugin configs
// under conf, as "<type>.d/<name>" → content, and points the plugins that
// the code under test runs at root and state, through the environment they
// inherit.
func Host(t *testing.T, h fixture.Host, root, state, conf string, confs map[string]string) {
	t.Helper()
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := h.Build(root); err != nil {
		t.Fatal(err)
	}
	for name, content := range confs {
		p := filepath.Join(conf, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("CDI_HOST_ROOT", root)
	t.Setenv("CDI_STATE_DIR", state)
}

// Logger sends log lines to the test's log.
func Logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, nil))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
