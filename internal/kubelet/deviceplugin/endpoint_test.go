package deviceplugin

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Run refuses a socket path the kernel cannot bind, saying so, instead
// of failing to listen with "invalid argument".
func TestRunRefusesLongSocketPath(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, strings.Repeat("d", 120-len(dir)))
	if err := os.Mkdir(long, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &Endpoint{Resource: "cdi-exec.io/tty", Dir: long, Socket: "cdi-exec.io-tty.sock", Log: slog.New(slog.DiscardHandler)}
	err := p.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "more than a unix socket can have (107)") {
		t.Fatalf("Run = %v, want a refusal of the socket path", err)
	}
}
