package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/test/fixture"
	"github.com/cdi-exec/plugins/test/kubelettest"
)

// binDir holds the plugin binaries.
var binDir string

func TestMain(m *testing.M) {
	kubelettest.Main(m, "cdi-kubelet-plugin", "../../plugins/...", &binDir)
}

// klogLine is a line of klog's text format: severity, date, time, pid,
// place, message.
var klogLine = regexp.MustCompile(`^[IWE]\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ \S+:\d+\] "`)

// TestDevicePluginObserved runs the device-plugin mode with a fake
// kubelet and each spelling of the flags: its metrics server answers
// /readyz once the resource is registered and /metrics with the plugin
// runs it made; its log is JSON lines or klog's text, and shows the
// plugin runs at -v=4 only. With --probe-address alone it serves the
// probes and no /metrics.
func TestDevicePluginObserved(t *testing.T) {
	tests := []struct {
		name       string
		flags      []string
		json       bool
		debug      bool
		probesOnly bool
	}{
		{"one dash, json, v=4", []string{"-metrics-address=127.0.0.1:0", "-logging-format=json", "-v=4"}, true, true, false},
		{"two dashes, text", []string{"--metrics-address", "127.0.0.1:0", "--logging-format", "text"}, false, false, false},
		{"two dashes, text, v=4", []string{"--metrics-address=127.0.0.1:0", "--v=4"}, false, true, false},
		{"probes only", []string{"--probe-address=127.0.0.1:0"}, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			root, state, conf := filepath.Join(dir, "host"), filepath.Join(dir, "state"), filepath.Join(dir, "conf")
			kubelettest.Host(t, fixture.Host{TTYs: map[string]int{"tty": 20}}, root, state, conf, map[string]string{
				"tty.d/tty.conf": `{"cdiVersion": "0.0.2", "name": "TTYs", "type": "tty", "plugin": "generic-tty", "args": {"num_system_reserved": 12}}`,
			})
			k := kubelettest.Start(t)
			getenv := func(key string) string {
				return map[string]string{"CDI_PATH": binDir, "CDI_STATE_DIR": state, "CDI_HOST_ROOT": root}[key]
			}
			var stderr kubelettest.Buffer
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan int, 1)
			args := append([]string{"device-plugin", "--kubelet-dir", k.Root, "--conf-dir", conf, "--cdi-spec-dir", filepath.Join(dir, "cdi")}, tt.flags...)
			go func() { done <- runOnce(t, ctx, args, env{getenv: getenv, stdout: io.Discard, stderr: &stderr}) }()
			stopped := false
			stop := func() int {
				if stopped {
					return exitOK
				}
				stopped = true
				cancel()
				return <-done
			}
			defer stop()

			served := "serving metrics and probes"
			if tt.probesOnly {
				served = "serving probes"
			}
			addr := waitFor(t, &stderr, regexp.MustCompile(served+`.*address\W+(127\.0\.0\.1:\d+)`))
			get := func(path string) (int, string) {
				resp, err := http.Get("http://" + addr + path)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			poll(t, "/readyz to answer 200", func() error {
				if code, body := get("/readyz"); code != http.StatusOK || body != "ok\n" {
					return fmt.Errorf("%d %q", code, body)
				}
				return nil
			})
			if code, body := get("/healthz"); code != http.StatusOK || body != "ok\n" {
				t.Errorf("/healthz: %d %q", code, body)
			}
			if code, _ := get("/metrics"); tt.probesOnly && code != http.StatusNotFound {
				t.Errorf("/metrics with --probe-address alone: %d", code)
			} else if code, body := get("/metrics"); !tt.probesOnly && (code != http.StatusOK ||
				!strings.Contains(body, `cdi_exec_plugin_run_duration_seconds_count{code="0",command="DEVICES",plugin="generic-tty"} `) ||
				!strings.Contains(body, `cdi_exec_published_devices{driver="cdi-exec.io/tty",health="healthy"} 7`)) {
				t.Errorf("/metrics: %d\n%s", code, body)
			}
			if st := stop(); st != exitOK {
				t.Fatalf("status %d\n%s", st, stderr.String())
			}

			log := stderr.String()
			for line := range strings.Lines(log) {
				var v map[string]any
				isJSON := json.Unmarshal([]byte(line), &v) == nil && v["msg"] != nil
				if isJSON != tt.json || !tt.json && !klogLine.MatchString(line) {
					t.Errorf("log line %q: JSON %v, want %v", line, isJSON, tt.json)
				}
			}
			if got := strings.Contains(log, "plugin run"); got != tt.debug {
				t.Errorf("plugin runs logged: %v, want %v\n%s", got, tt.debug, log)
			}
			if !strings.Contains(log, "registered with the kubelet") || !strings.Contains(log, "stopped") {
				t.Errorf("log:\n%s", log)
			}
		})
	}
}

// waitFor waits until the log matches re, and returns the match's first
// group.
func waitFor(t *testing.T, log *kubelettest.Buffer, re *regexp.Regexp) string {
	t.Helper()
	var m []string
	poll(t, re.String()+" in the log", func() error {
		if m = re.FindStringSubmatch(log.String()); m == nil {
			return fmt.Errorf("not in:\n%s", log.String())
		}
		return nil
	})
	return m[1]
}

// poll waits until cond holds, for at most a minute; the bound only stops
// a broken test.
func poll(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
