package protocol

import (
	"strings"
	"testing"
	"time"
)

func TestParseTimeout(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration // 0: an error
	}{
		{"10", 10 * time.Second},
		{"0.5", 500 * time.Millisecond},
		{"500ms", 500 * time.Millisecond},
		{"2m", 2 * time.Minute},
		{"0", 0},
		{"-1s", 0},
		{"86401", 0},
		{"soon", 0},
		{"", 0},
	}
	for _, tt := range tests {
		got, err := ParseTimeout(tt.in)
		if (err == nil) != (tt.want != 0) || got != tt.want {
			t.Errorf("ParseTimeout(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestReadEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Env
		warn bool
	}{
		{"defaults", nil, Env{"/", "/var/lib/cdi", "/opt/cdi/bin", "/etc/cdi", 10 * time.Second}, false},
		{"empty is unset", map[string]string{EnvHostRoot: "", EnvLockTimeout: ""},
			Env{"/", "/var/lib/cdi", "/opt/cdi/bin", "/etc/cdi", 10 * time.Second}, false},
		{"overrides", map[string]string{EnvHostRoot: "/h", EnvStateDir: "/s", EnvPath: "/p", EnvConfDir: "/c", EnvLockTimeout: "1.5"},
			Env{"/h", "/s", "/p", "/c", 1500 * time.Millisecond}, false},
		{"bad lock timeout keeps the default", map[string]string{EnvLockTimeout: "soon"},
			Env{"/", "/var/lib/cdi", "/opt/cdi/bin", "/etc/cdi", 10 * time.Second}, true},
	}
	for _, tt := range tests {
		got, err := ReadEnv(func(k string) string { return tt.env[k] })
		if got != tt.want || (err != nil) != tt.warn {
			t.Errorf("%s: ReadEnv = %+v, %v; want %+v, warning %v", tt.name, got, err, tt.want, tt.warn)
		}
	}
}

func TestParseTimeoutRefusesUnusable(t *testing.T) {
	good := map[string]time.Duration{
		"10": 10 * time.Second, "1.5": 1500 * time.Millisecond, "500ms": 500 * time.Millisecond,
		"1ns": time.Nanosecond, "1e-9": time.Nanosecond, "86400": 24 * time.Hour, "2m": 2 * time.Minute,
	}
	for in, want := range good {
		if got, err := ParseTimeout(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	for _, in := range []string{"NaN", "nan", "1e-10", "Inf", "+Inf", "-Inf", "infinity", "0", "-1", "-1s", "0s",
		"86401", "25h", "garbage", "10 s", "1e400", "0x1p-40", "", " 10"} {
		if got, err := ParseTimeout(in); err == nil {
			t.Errorf("%q accepted as %v", in, got)
		}
	}
	if _, err := ParseTimeout(strings.Repeat("9", 400)); err == nil {
		t.Error("huge number accepted")
	}
}

// Only ASCII letters change case.
func TestCommand(t *testing.T) {
	for in, want := range map[string]string{"info": "INFO", "InFo": "INFO", "ınfo": "ıNFO", "verſion": "VERſION", "dEł": "DEł", "": ""} {
		if got := Command(in); got != want {
			t.Errorf("Command(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckRoots(t *testing.T) {
	for _, tt := range []struct {
		e    Env
		code int
	}{
		{Env{HostRoot: "/", StateDir: "/var/lib/cdi"}, 0},
		{Env{HostRoot: "host", StateDir: "/s"}, CodeInvalidConfig},
		{Env{HostRoot: "./", StateDir: "/s"}, CodeInvalidConfig},
		{Env{HostRoot: "/", StateDir: "var/lib/cdi"}, CodeStore},
		{Env{HostRoot: "/", StateDir: "."}, CodeStore},
	} {
		err := tt.e.CheckRoots()
		if code := 0; err != nil {
			code = AsError(err).Code
			if code != tt.code {
				t.Errorf("%+v: %v", tt.e, err)
			}
		} else if tt.code != 0 {
			t.Errorf("%+v accepted", tt.e)
		}
	}
}

// Misspelt CDI_* variables are named with the one meant; a misspelt
// state directory says that the live default is in use.
func TestEnvNearMisses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []string
		want    []string // substrings, one per warning, in order
	}{
		{"none", []string{"HOME=/root", "CDI_STATE_DIR=/tmp/s", "CDI_COMMAND=ADD"}, nil},
		{"unrelated CDI names", []string{"CDI_SERVICE_HOST=10.0.0.1", "CDI_PORT=tcp://x", "CDI_TEST_BIN_DIR=/b", "CDI_E2E_CACHE=/c"}, nil},
		{"stat dir", []string{"CDI_STAT_DIR=/tmp/s"}, []string{
			"CDI_STAT_DIR is set, but no program of the suite reads it: did you mean CDI_STATE_DIR? CDI_STATE_DIR is not set, so the state directory is the node's own /var/lib/cdi"}},
		{"stat dir beside the real one", []string{"CDI_STAT_DIR=/tmp/s", "CDI_STATE_DIR=/tmp/t"}, []string{
			"did you mean CDI_STATE_DIR?"}},
		{"far from state dir", []string{"CDI_PLUGIN_STATE=/tmp/s"}, []string{"CDI_PLUGIN_STATE is set, but no program of the suite reads it: did you mean CDI_STATE_DIR? CDI_STATE_DIR is not set"}},
		{"conf dir", []string{"CDI_CONFDIR=/etc/x"}, []string{"did you mean CDI_CONF_DIR?"}},
		{"path and host", []string{"CDI_PATHS=/x", "CDI_HOSTROOT=/h"}, []string{"did you mean CDI_PATH?", "did you mean CDI_HOST_ROOT?"}},
		{"lock", []string{"CDI_LOCK_TIMEOUTS=1"}, []string{"did you mean CDI_LOCK_TIMEOUT?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := EnvNearMisses(tc.environ)
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %d warnings", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d: %q lacks %q", i, got[i], w)
				}
			}
		})
	}
}
