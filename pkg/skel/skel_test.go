package skel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/pkg/protocol"
)

// fake is a plugin whose answers are set per test.
type fake struct {
	info  map[string]int
	add   *AddResult
	err   error
	panic bool
	calls *[]*Call
	// shared is the plugin's About.SharedKeys.
	shared bool
}

func (f fake) record(c *Call) error {
	if f.calls != nil {
		*f.calls = append(*f.calls, c)
	}
	if f.panic {
		panic("boom")
	}
	return f.err
}

func (f fake) Info(_ context.Context, c *Call) (map[string]int, error) {
	return f.info, f.record(c)
}
func (f fake) Add(_ context.Context, c *Call) (*AddResult, error) { return f.add, f.record(c) }
func (f fake) Del(_ context.Context, c *Call) error               { return f.record(c) }

const gpuConf = `{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","args":{"k":1}}`

// explodingReader fails the test when read: VERSION must not touch stdin.
type explodingReader struct{ t *testing.T }

func (r explodingReader) Read([]byte) (int, error) {
	r.t.Error("stdin was read")
	return 0, io.EOF
}

func run(t *testing.T, env map[string]string, stdin io.Reader, p fake) (int, map[string]any, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	d := Dispatcher{
		Getenv: func(k string) string { return env[k] },
		Stdin:  stdin,
		Stdout: &out,
		Stderr: &errOut,
	}
	about := About{Subtypes: []string{"memory"}, SharedKeys: p.shared, New: func(c *Call) (Plugin, error) {
		var a struct {
			K int `json:"k"`
		}
		if err := c.Config.DecodeArgs(&a); err != nil {
			return nil, err
		}
		return p, nil
	}}
	status := d.Run(context.Background(), about)
	if out.Len() == 0 {
		return status, nil, ""
	}
	var obj map[string]any
	if err := json.Unmarshal(out.Bytes(), &obj); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out.String())
	}
	if !strings.HasPrefix(out.String(), "{\n  \"cdiVersion\": ") {
		t.Fatalf("cdiVersion is not first or not indented:\n%s", out.String())
	}
	return status, obj, out.String()
}

func TestRun(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		stdin   string
		plugin  fake
		status  int
		code    float64 // 0: success
		version string
		details string
	}{
		{name: "spec error 1: unknown CDI_VERSION answers in the config's version",
			env: map[string]string{"CDI_VERSION": "0.999", "CDI_COMMAND": "ADD"}, stdin: gpuConf,
			status: 1, code: 1, version: "0.0.1", details: "Unsupported version: 0.999"},
		{name: "spec error 2: unknown command",
			env: map[string]string{"CDI_VERSION": "0.0.1", "CDI_COMMAND": "MYCMD"}, stdin: gpuConf,
			status: 1, code: 3, version: "0.0.1", details: "Unsupported command: MYCMD"},
		{name: "missing command",
			env: map[string]string{"CDI_VERSION": "0.0.1"}, stdin: gpuConf, status: 1, code: 3, version: "0.0.1"},
		{name: "version checked before stdin",
			env: map[string]string{"CDI_VERSION": "9", "CDI_COMMAND": "ADD"}, stdin: "garbage", status: 1, code: 1, version: "0.0.2"},
		{name: "stdin not JSON",
			env: map[string]string{"CDI_VERSION": "0.0.1", "CDI_COMMAND": "INFO"}, stdin: "garbage", status: 1, code: 101, version: "0.0.1"},
		{name: "stdin a JSON array",
			env: map[string]string{"CDI_COMMAND": "INFO"}, stdin: "[]", status: 1, code: 101, version: "0.0.2"},
		{name: "stdin empty",
			env: map[string]string{"CDI_COMMAND": "INFO"}, stdin: "", status: 1, code: 101, version: "0.0.2"},
		{name: "missing type",
			env: map[string]string{"CDI_COMMAND": "INFO"}, stdin: `{"cdiVersion":"0.0.1","name":"x","plugin":"drm"}`, status: 1, code: 101, version: "0.0.1"},
		{name: "type not a string",
			env: map[string]string{"CDI_COMMAND": "INFO"}, stdin: `{"cdiVersion":"0.0.1","name":"x","type":1,"plugin":"drm"}`, status: 1, code: 101, version: "0.0.1"},
		{name: "type breaks the grammar",
			env: map[string]string{"CDI_COMMAND": "INFO"}, stdin: `{"cdiVersion":"0.0.1","name":"x","type":"g_pu","plugin":"drm"}`, status: 1, code: 101, version: "0.0.1"},
		{name: "config before config version",
			env: map[string]string{"CDI_COMMAND": "INFO"}, stdin: `{"cdiVersion":"9.9.9","name":"x","plugin":"drm"}`, status: 1, code: 101, version: "0.0.2"},
		{name: "config version unsupported",
			env: map[string]string{"CDI_COMMAND": "INFO", "CDI_VERSION": "0.0.2"}, stdin: `{"cdiVersion":"9.9.9","name":"x","type":"gpu","plugin":"drm"}`,
			status: 1, code: 2, version: "0.0.2", details: "Unsupported config version: 9.9.9"},
		{name: "config version before command",
			env: map[string]string{"CDI_COMMAND": "MYCMD"}, stdin: `{"cdiVersion":"9.9.9","name":"x","type":"gpu","plugin":"drm"}`, status: 1, code: 2, version: "0.0.2"},
		{name: "unknown arg",
			env: map[string]string{"CDI_COMMAND": "INFO"}, stdin: `{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","args":{"kk":1}}`,
			status: 1, code: 101, version: "0.0.1"},
		{name: "env version wins when both supported",
			env: map[string]string{"CDI_COMMAND": "info", "CDI_VERSION": "0.0.2"}, stdin: gpuConf,
			plugin: fake{info: map[string]int{"gpu": 3}}, status: 0, version: "0.0.2"},
		{name: "missing CDI_VERSION uses the config's",
			env: map[string]string{"CDI_COMMAND": "Info"}, stdin: gpuConf,
			plugin: fake{info: map[string]int{"gpu": 3}}, status: 0, version: "0.0.1"},
		{name: "ADD without request id",
			env: map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST": "gpu:1"}, stdin: gpuConf, status: 1, code: 102, version: "0.0.1"},
		{name: "ADD bad request id",
			env: map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST": "gpu:1", "CDI_REQUEST_ID": "-x"}, stdin: gpuConf, status: 1, code: 102, version: "0.0.1"},
		{name: "request id before specs",
			env: map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST": "tty:1", "CDI_REQUEST_ID": "a_b"}, stdin: gpuConf, status: 1, code: 102, version: "0.0.1"},
		{name: "spec error 3: subtype checked before amounts",
			env: map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST": "gpu:1,gpu-mem:2048Mi", "CDI_REQUEST_ID": "3456"}, stdin: gpuConf,
			status: 1, code: 4, version: "0.0.1", details: "Unsupported resource-spec: gpu-mem"},
		{name: "other type",
			env: map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST": "tty:x", "CDI_REQUEST_ID": "3456"}, stdin: gpuConf,
			status: 1, code: 4, version: "0.0.1", details: "Unsupported resource-spec: tty"},
		{name: "bad amount",
			env: map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST": "gpu:01", "CDI_REQUEST_ID": "3456"}, stdin: gpuConf, status: 1, code: 102, version: "0.0.1"},
		{name: "missing request",
			env: map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST_ID": "3456"}, stdin: gpuConf, status: 1, code: 102, version: "0.0.1"},
		{name: "bad NUMA list",
			env: map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST": "gpu:1", "CDI_REQUEST_ID": "3456", "CDI_REQUEST_NUMA_LOCALITY": "0,-1"}, stdin: gpuConf, status: 1, code: 102, version: "0.0.1"},
		{name: "ADD success",
			env: map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST": "gpu:1,gpu-memory:2", "CDI_REQUEST_ID": "3456"}, stdin: gpuConf,
			plugin: fake{add: &AddResult{Devices: []string{"/dev/dri/card0"}}}, status: 0, version: "0.0.1"},
		{name: "plugin error",
			env: map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST": "gpu:1", "CDI_REQUEST_ID": "3456"}, stdin: gpuConf,
			plugin: fake{err: protocol.NewError(protocol.CodeInsufficient, "none")}, status: 1, code: 103, version: "0.0.1"},
		{name: "uncoded error is internal",
			env: map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST": "gpu:1", "CDI_REQUEST_ID": "3456"}, stdin: gpuConf,
			plugin: fake{err: errors.New("disk on fire")}, status: 1, code: 100, version: "0.0.1", details: "disk on fire"},
		{name: "panic is code 100",
			env: map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST": "gpu:1", "CDI_REQUEST_ID": "3456"}, stdin: gpuConf,
			plugin: fake{panic: true}, status: 1, code: 100, version: "0.0.1", details: "panic: boom"},
		{name: "DEL success prints nothing",
			env: map[string]string{"CDI_COMMAND": "DEL", "CDI_REQUEST_ID": "1234"}, stdin: gpuConf, status: 0},
		{name: "DEL unknown id exits 0",
			env: map[string]string{"CDI_COMMAND": "DEL", "CDI_REQUEST_ID": "3456"}, stdin: gpuConf,
			plugin: fake{err: protocol.NewError(protocol.CodeUnknownRequestID, "")}, status: 0, code: 5, version: "0.0.1"},
		{name: "DEL panic exits 0",
			env: map[string]string{"CDI_COMMAND": "del", "CDI_REQUEST_ID": "3456"}, stdin: gpuConf,
			plugin: fake{panic: true}, status: 0, code: 100, version: "0.0.1"},
		{name: "DEL bad version exits 0",
			env: map[string]string{"CDI_COMMAND": "DEL", "CDI_VERSION": "1.0", "CDI_REQUEST_ID": "3456"}, stdin: gpuConf, status: 0, code: 1, version: "0.0.1"},
		{name: "DEL bad config exits 0",
			env: map[string]string{"CDI_COMMAND": "DEL", "CDI_REQUEST_ID": "3456"}, stdin: "{", status: 0, code: 101, version: "0.0.2"},
		{name: "DEL without id exits 0",
			env: map[string]string{"CDI_COMMAND": "DEL"}, stdin: gpuConf, status: 0, code: 102, version: "0.0.1"},
		{name: "GC unsupported by this plugin",
			env: map[string]string{"CDI_COMMAND": "GC", "CDI_VALID_REQUEST_IDS": "a"}, stdin: gpuConf, status: 1, code: 3, version: "0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, obj, _ := run(t, tt.env, strings.NewReader(tt.stdin), tt.plugin)
			if status != tt.status {
				t.Errorf("status = %d, want %d", status, tt.status)
			}
			if tt.version == "" {
				if obj != nil {
					t.Fatalf("printed %v, want nothing", obj)
				}
				return
			}
			if obj["cdiVersion"] != tt.version {
				t.Errorf("cdiVersion = %v, want %s", obj["cdiVersion"], tt.version)
			}
			code, _ := obj["code"].(float64)
			if code != tt.code {
				t.Errorf("code = %v, want %v (%v)", obj["code"], tt.code, obj)
			}
			if code != 0 {
				if msg, _ := obj["msg"].(string); msg != protocol.Message(int(code)) {
					t.Errorf("msg = %q, want %q", msg, protocol.Message(int(code)))
				}
				if _, ok := obj["details"]; ok && obj["details"] == "" {
					t.Errorf("empty details printed")
				}
			}
			if tt.details != "" && obj["details"] != tt.details {
				t.Errorf("details = %q, want %q", obj["details"], tt.details)
			}
		})
	}
}

func TestVersionNeverReadsStdinNorFails(t *testing.T) {
	for _, env := range []map[string]string{
		{"CDI_COMMAND": "VERSION"},
		{"CDI_COMMAND": "version", "CDI_VERSION": "0.999", "CDI_REQUEST": "!!"},
	} {
		status, _, out := run(t, env, explodingReader{t}, fake{})
		want := "{\n  \"cdiVersion\": \"0.0.2\",\n  \"supportedVersions\": [\n    \"0.0.1\",\n    \"0.0.2\"\n  ]\n}\n"
		if status != 0 || out != want {
			t.Errorf("status %d, out:\n%s", status, out)
		}
	}
}

func TestInfoKeysOrderedAndScoped(t *testing.T) {
	env := map[string]string{"CDI_COMMAND": "INFO"}
	_, _, out := run(t, env, strings.NewReader(gpuConf), fake{info: map[string]int{"gpu-memory": 5, "gpu": 2, "gpu-a": 1}})
	want := "{\n  \"cdiVersion\": \"0.0.1\",\n  \"gpu\": 2,\n  \"gpu-a\": 1,\n  \"gpu-memory\": 5\n}\n"
	if out != want {
		t.Errorf("got\n%s", out)
	}
	// The type's key is present even at zero.
	_, obj, _ := run(t, env, strings.NewReader(gpuConf), fake{info: map[string]int{}})
	if obj["gpu"] != float64(0) {
		t.Errorf("gpu missing: %v", obj)
	}
	// A key outside the type is refused rather than advertised.
	status, obj, _ := run(t, env, strings.NewReader(gpuConf), fake{info: map[string]int{"tty": 1}})
	if status != 1 || obj["code"] != float64(protocol.CodeInternal) {
		t.Errorf("foreign key: %v", obj)
	}
}

func TestAddNUMALocalityOnlyWhenRequested(t *testing.T) {
	p := fake{add: &AddResult{Devices: []string{"/dev/a"}, NUMA: []int{1}}}
	env := map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST": "gpu:1", "CDI_REQUEST_ID": "1"}
	_, obj, _ := run(t, env, strings.NewReader(gpuConf), p)
	if _, ok := obj["numa_locality"]; ok {
		t.Errorf("numa_locality printed without a request: %v", obj)
	}
	env["CDI_REQUEST_NUMA_LOCALITY"] = "1,1"
	var calls []*Call
	p.calls = &calls
	_, obj, _ = run(t, env, strings.NewReader(gpuConf), p)
	if l, _ := obj["numa_locality"].([]any); len(l) != 1 {
		t.Errorf("numa_locality = %v", obj["numa_locality"])
	}
	if len(calls) != 1 || len(calls[0].Locality) != 1 {
		t.Errorf("locality passed as %v", calls[0].Locality)
	}
	// An empty devices list is printed as [] rather than null.
	_, obj, _ = run(t, env, strings.NewReader(gpuConf), fake{add: &AddResult{}})
	if d, ok := obj["devices"].([]any); !ok || len(d) != 0 {
		t.Errorf("devices = %#v", obj["devices"])
	}
}

func TestEnvDefaultsAndOverrides(t *testing.T) {
	var calls []*Call
	env := map[string]string{"CDI_COMMAND": "INFO"}
	run(t, env, strings.NewReader(gpuConf), fake{info: map[string]int{}, calls: &calls})
	e := calls[0].Env
	if e.HostRoot != "/" || e.StateDir != "/var/lib/cdi" || e.Path != "/opt/cdi/bin" || e.ConfDir != "/etc/cdi" || e.LockTimeout != protocol.DefaultLockTimeout {
		t.Errorf("defaults: %+v", e)
	}
	env = map[string]string{"CDI_COMMAND": "INFO", "CDI_HOST_ROOT": "/h", "CDI_STATE_DIR": "/s", "CDI_PATH": "/p", "CDI_CONF_DIR": "/c", "CDI_LOCK_TIMEOUT": "1.5"}
	run(t, env, strings.NewReader(gpuConf), fake{info: map[string]int{}, calls: &calls})
	e = calls[1].Env
	if e.HostRoot != "/h" || e.StateDir != "/s" || e.Path != "/p" || e.ConfDir != "/c" || e.LockTimeout.Seconds() != 1.5 {
		t.Errorf("overrides: %+v", e)
	}
}
