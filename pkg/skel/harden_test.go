package skel

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/pkg/protocol"
)

// Every unusable CDI_LOCK_TIMEOUT warns on stderr and leaves the default.
func TestLockTimeoutWarns(t *testing.T) {
	for _, v := range []string{"NaN", "1e-10", "Inf", "-5", "garbage", "0"} {
		var calls []*Call
		env := map[string]string{"CDI_COMMAND": "INFO", "CDI_LOCK_TIMEOUT": v}
		var errOut bytes.Buffer
		d := Dispatcher{Getenv: func(k string) string { return env[k] }, Stdin: strings.NewReader(gpuConf), Stdout: &bytes.Buffer{}, Stderr: &errOut}
		p := fake{info: map[string]int{"gpu": 1}, calls: &calls}
		if status := d.Run(context.Background(), About{New: func(*Call) (Plugin, error) { return p, nil }}); status != 0 {
			t.Fatalf("%s: status %d", v, status)
		}
		if !strings.Contains(errOut.String(), "drm: warning: ignoring CDI_LOCK_TIMEOUT") {
			t.Errorf("%s: no warning: %q", v, errOut.String())
		}
		if len(calls) != 1 || calls[0].Env.LockTimeout != protocol.DefaultLockTimeout {
			t.Errorf("%s: timeout not the default", v)
		}
	}
}

// CDI_COMMAND is matched ASCII case-insensitively only.
func TestCommandASCIIOnly(t *testing.T) {
	tests := []struct {
		cmd    string
		status int
		code   float64
	}{
		{"info", 0, 0},
		{"InFo", 0, 0},
		{"ınfo", 1, 3},    // dotless i: strings.ToUpper makes it INFO
		{"verſion", 1, 3}, // long s: strings.ToUpper makes it VERSION
		{"DEL", 0, 102},   // no request-id
		{"dEł", 1, 3},
	}
	for _, tt := range tests {
		status, obj, _ := run(t, map[string]string{"CDI_COMMAND": tt.cmd}, strings.NewReader(gpuConf), fake{info: map[string]int{"gpu": 1}})
		code, _ := obj["code"].(float64)
		if status != tt.status || code != tt.code {
			t.Errorf("%q: status %d, %v", tt.cmd, status, obj)
		}
		if tt.code == 3 && obj["details"] != "Unsupported command: "+tt.cmd {
			t.Errorf("%q: details %v", tt.cmd, obj["details"])
		}
	}
}

// Relative roots are refused rather than resolved against the working
// directory: the host root is configuration (101), the state directory is
// where the store lives (106).
func TestRelativeRoots(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		code float64
	}{
		{map[string]string{"CDI_HOST_ROOT": "host"}, 101},
		{map[string]string{"CDI_HOST_ROOT": "./"}, 101},
		{map[string]string{"CDI_STATE_DIR": "var/lib/cdi"}, 106},
		{map[string]string{"CDI_STATE_DIR": "."}, 106},
	} {
		for _, cmd := range []string{"INFO", "DEL"} {
			tt.env["CDI_COMMAND"], tt.env["CDI_REQUEST_ID"] = cmd, "a"
			status, obj, _ := run(t, tt.env, strings.NewReader(gpuConf), fake{info: map[string]int{"gpu": 1}})
			if obj["code"] != tt.code || status != map[string]int{"INFO": 1, "DEL": 0}[cmd] {
				t.Errorf("%v: %d %v", tt.env, status, obj)
			}
		}
	}
}

// The config's own members: a case variant of a known name, or a name
// given twice, is 101 naming it; unknown members stay allowed.
func TestConfigMembersExact(t *testing.T) {
	for conf, want := range map[string]string{
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","Type":"tty"}`:         `"Type" is not "type"`,
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","type":"tty"}`:         `"type" is given twice`,
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","ARGS":{}}`:            `"ARGS" is not "args"`,
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","args":{"k":1,"K":2}}`: `"K" is not "k"`,
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","comment":"kept"}`:     "",
	} {
		status, obj, _ := run(t, map[string]string{"CDI_COMMAND": "INFO"}, strings.NewReader(conf), fake{info: map[string]int{"gpu": 1}})
		details, _ := obj["details"].(string)
		switch {
		case want == "" && status != 0:
			t.Errorf("%s: %v", conf, obj)
		case want != "" && (obj["code"] != 101.0 || !strings.Contains(details, want)):
			t.Errorf("%s: %v, want 101 saying %s", conf, obj, want)
		}
	}
}
