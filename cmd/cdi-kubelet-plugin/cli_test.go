package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/cdi-exec/plugins/internal/kubelet/modelock"
)

// TestHelpHidesGatedFlags checks that the help lists component-base's
// logging flags but not its alpha ones, which need a feature gate this
// command does not take.
func TestHelpHidesGatedFlags(t *testing.T) {
	for _, mode := range []string{"dra", "device-plugin"} {
		var out bytes.Buffer
		e := env{getenv: func(string) string { return "" }, stdout: &out, stderr: &out}
		if status := runOnce(t, context.Background(), []string{mode, "--help"}, e); status != exitOK {
			t.Fatalf("%s --help: status %d", mode, status)
		}
		for _, want := range []string{"--vmodule", "--log-flush-frequency", "--logging-format"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s --help lacks %s", mode, want)
			}
		}
		for _, gated := range []string{"split-stream", "info-buffer-size", "[Alpha]"} {
			if strings.Contains(out.String(), gated) {
				t.Errorf("%s --help lists the gated %s", mode, gated)
			}
		}
	}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args   []string
		status int
		stdout string // a text stdout must contain
		stderr string // a text stderr must contain
	}{
		{nil, exitUsage, "", "Usage: cdi-kubelet-plugin device-plugin"},
		{[]string{"--help"}, exitOK, "\n  --resource-prefix PREFIX\n", ""},
		{[]string{"device-plugin", "--help"}, exitOK, "\n  --metrics-address ADDR\n", ""},
		{[]string{"device-plugin", "--help"}, exitOK, "\n  --logging-format string\n", ""},
		{[]string{"cdi"}, exitUsage, "", `unknown mode "cdi"`},
		{[]string{"dra"}, exitUsage, "", "--node-name is required"},
		{[]string{"dra", "--help"}, exitOK, "\n  --driver-suffix SUFFIX\n", ""},
		{[]string{"dra", "-help"}, exitOK, "\n  --v value\n", ""},
		{[]string{"dra", "--node-name", "n", "--logging-format", "xml"}, exitUsage, "", `format: Invalid value: "xml": Unsupported log format`},
		{[]string{"device-plugin", "-logging-format=yaml"}, exitUsage, "", `format: Invalid value: "yaml": Unsupported log format`},
		{[]string{"device-plugin", "--metrics-address", "256.0.0.1:1", "--conf-dir", "/nonexistent"}, exitFailed, "", "no usable config under /nonexistent"},
		{[]string{"dra", "--node-name", "n", "extra"}, exitUsage, "", `unexpected argument "extra"`},
		{[]string{"dra", "--node-name", "n", "--stale-interval", "0s"}, exitUsage, "", "--stale-interval must be positive"},
		{[]string{"dra", "--node-name", "n", "--stale-grace", "-1s"}, exitUsage, "", "--stale-grace must not be negative"},
		{[]string{"dra", "-node-name=n", "-stale-grace=-1s"}, exitUsage, "", "--stale-grace must not be negative"}, // one dash parses too
		{[]string{"dra", "--node-name", "n", "--driver-suffix", "Not_DNS"}, exitUsage, "", "--driver-suffix"},
		{[]string{"dra", "--node-name", "n", "--kube-api-qps", "0"}, exitUsage, "", "--kube-api-qps and --kube-api-burst must be positive"},
		{[]string{"dra", "--node-name", "n", "--kube-api-burst", "0"}, exitUsage, "", "--kube-api-qps and --kube-api-burst must be positive"},
		{[]string{"dra", "--help"}, exitOK, "-kube-api-qps QPS", ""},
		{[]string{"dra", "--node-name", "n", "--kubeconfig", "/nonexistent"}, exitFailed, "", "cannot reach the API server"},
		{[]string{"device-plugin", "--nope"}, exitUsage, "", "flag provided but not defined: -nope"},
		{[]string{"device-plugin", "extra"}, exitUsage, "", `unexpected argument "extra"`},
		{[]string{"device-plugin", "--gc-interval", "0s"}, exitUsage, "", "--gc-interval must be positive"},
		{[]string{"device-plugin", "--gc-grace", "-1s"}, exitUsage, "", "--gc-grace must not be negative"},
		{[]string{"device-plugin", "--resource-prefix", "a/b"}, exitUsage, "", "must not contain /"},
		{[]string{"device-plugin", "--conf-dir", "/nonexistent"}, exitFailed, "", "no usable config under /nonexistent"},
		{[]string{"device-plugin", "--conf-dir", "/nonexistent", "--type", "gpu"}, exitFailed, "", `no usable config of type \"gpu\"`},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		e := env{getenv: func(string) string { return "" }, stdout: &out, stderr: &errOut}
		status := runOnce(t, context.Background(), tt.args, e)
		if status != tt.status || !strings.Contains(out.String(), tt.stdout) || !strings.Contains(errOut.String(), tt.stderr) {
			t.Errorf("%q: status %d\nstdout: %s\nstderr: %s", tt.args, status, out.String(), errOut.String())
		}
	}
}

// runOnce runs the command, and then undoes its logging configuration,
// which k8s.io/component-base lets a process apply only once.
func runOnce(t *testing.T, ctx context.Context, args []string, e env) int {
	t.Helper()
	defer func() {
		if err := logsapi.ResetForTest(nil); err != nil {
			t.Fatal(err)
		}
	}()
	return run(ctx, args, e)
}

// TestModesExclude: the device-plugin mode does not start on a type the
// dra mode serves on this node (the lock in CDI_STATE_DIR), and the dra
// mode needs a usable config even with an API server configured.
func TestModesExclude(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "conf")
	if err := os.MkdirAll(filepath.Join(conf, "tty.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := os.WriteFile(filepath.Join(conf, "tty.d", "tty.conf"), []byte(`{"cdiVersion": "0.0.2", "name": "t", "type": "tty", "plugin": "generic-tty"}`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	l, err := modelock.Acquire(t.Context(), state, modelock.DRA, []string{"tty"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	kubeconfig := writeKubeconfig(t, dir)
	getenv := func(k string) string { return map[string]string{"CDI_STATE_DIR": state}[k] }
	tests := []struct {
		args   []string
		stderr string
	}{
		{[]string{"device-plugin", "--conf-dir", conf, "--kubelet-dir", dir}, "served by another mode: the dra mode runs on this node"},
		{[]string{"dra", "--node-name", "n", "--kubeconfig", kubeconfig, "--conf-dir", filepath.Join(dir, "none")}, "no usable config under"},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		status := runOnce(t, t.Context(), tt.args, env{getenv: getenv, stdout: &out, stderr: &errOut})
		if status != exitFailed || !strings.Contains(errOut.String(), tt.stderr) {
			t.Errorf("%q: status %d\nstderr: %s", tt.args, status, errOut.String())
		}
	}
}

// TestAPIClientLimits: the dra mode's API client takes the kubelet's
// request limits by default, not client-go's 5 a second, and the flags
// change them.
func TestAPIClientLimits(t *testing.T) {
	kubeconfig := writeKubeconfig(t, t.TempDir())
	e := env{getenv: func(string) string { return "" }, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	for _, tt := range []struct {
		args  []string
		qps   float32
		burst int
	}{
		{nil, 50, 100},
		{[]string{"--kube-api-qps", "7.5", "--kube-api-burst", "3"}, 7.5, 3},
	} {
		var api apiClient
		fs, _, _ := draFlags(e, &api)
		if err := fs.Parse(append([]string{"--kubeconfig", kubeconfig}, tt.args...)); err != nil {
			t.Fatal(err)
		}
		cfg, err := api.config()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.QPS != tt.qps || cfg.Burst != tt.burst {
			t.Errorf("%q: QPS %v, burst %d; want %v, %d", tt.args, cfg.QPS, cfg.Burst, tt.qps, tt.burst)
		}
	}
}

// writeKubeconfig writes a kubeconfig for an API server that is not
// there into dir and returns its path.
func writeKubeconfig(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "kubeconfig")
	err := os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return path
}
