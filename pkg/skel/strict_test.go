package skel

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

type strictArgs struct {
	Reserved int      `json:"num_system_reserved"`
	Pattern  string   `json:"pattern"`
	List     []string `json:"list"`
	Inner    *struct {
		Plugin string          `json:"plugin"`
		Args   json.RawMessage `json:"args"`
	} `json:"inner"`
	Items []struct {
		Name string `json:"name"`
	} `json:"items"`
}

func TestDecodeStrict(t *testing.T) {
	tests := []struct {
		in   string
		err  string // "" for success
		want int    // Reserved, on success
	}{
		{`{"num_system_reserved": 12}`, "", 12},
		{`{"num_system_reserved": 12, "NUM_SYSTEM_RESERVED": 0}`, `"NUM_SYSTEM_RESERVED" is not "num_system_reserved"`, 0},
		{`{"Num_System_Reserved": 3}`, `"Num_System_Reserved" is not`, 0},
		{`{"num_system_reserved": 12, "num_system_reserved": 0}`, `"num_system_reserved" is given twice`, 0},
		{`{"num_system_reserved": 1, "num_syſtem_reserved": 2}`, `is not "num_system_reserved"`, 0}, // long s folds to s
		{`{"patterK": "x"}`, `unknown field "patterK"`, 0},
		{`{"pattern": "ttyS", "PATTERN": "tty"}`, `"PATTERN" is not "pattern"`, 0},
		{`{"inner": {"plugin": "drm", "Plugin": "x"}}`, `"inner.Plugin" is not "inner.plugin"`, 0},
		{`{"inner": {"plugin": "drm", "args": {"A": 1, "a": 2}}}`, "", 0}, // a delegate's args are its own
		{`{"inner": {"plugin": "a", "plugin": "b"}}`, `"inner.plugin" is given twice`, 0},
		{`{"items": [{"name": "a"}, {"NAME": "b"}]}`, `"items[1].NAME" is not "items[1].name"`, 0},
		{`{"list": ["a", "A"]}`, "", 0},
		{`{"num_system_reserved": 1} {}`, "data after", 0},
		{`{"num_system_reserved": "x"}`, "cannot unmarshal", 0},
		{`[1]`, "cannot unmarshal", 0},
		{`{"num_sys`, "unexpected EOF", 0},
		{`{"num_system_re\u0073erved": 7}`, "", 7}, // escapes decode to the exact name
	}
	for _, tt := range tests {
		var a strictArgs
		err := DecodeStrict([]byte(tt.in), &a)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.in, err)
		case tt.err == "" && a.Reserved != tt.want:
			t.Errorf("%s: reserved %d", tt.in, a.Reserved)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: err = %v, want %q", tt.in, err, tt.err)
		}
	}
	// A map takes any names, but each once.
	var m map[string]json.RawMessage
	if err := DecodeStrict([]byte(`{"a":1,"A":2}`), &m); err != nil {
		t.Fatal(err)
	}
	if err := DecodeStrict([]byte(`{"a":1,"a":2}`), &m); err == nil {
		t.Fatal("duplicate accepted in a map")
	}
}

// FuzzDecodeStrict: whatever DecodeStrict accepts, encoding/json decodes
// to the same value, and every member name of the object is exactly one of
// the struct's names, given once.
func FuzzDecodeStrict(f *testing.F) {
	f.Add(`{"num_system_reserved": 12, "pattern": "ttyS"}`)
	f.Add(`{"num_system_reserved": 12, "NUM_SYSTEM_RESERVED": 0}`)
	f.Add(`{"inner": {"plugin": "drm", "args": {"x": 1}}, "items": [{"name": "a"}]}`)
	f.Add(`{"list": ["a"], "list": ["b"]}`)
	names := map[string]bool{"num_system_reserved": true, "pattern": true, "list": true, "inner": true, "items": true}
	f.Fuzz(func(t *testing.T, in string) {
		var a strictArgs
		if DecodeStrict([]byte(in), &a) != nil {
			return
		}
		var b strictArgs
		if err := json.Unmarshal([]byte(in), &b); err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("encoding/json disagrees: %v\n%+v\n%+v", err, a, b)
		}
		// An independent count of the members: one Decode into a map
		// per member, through a token stream.
		dec := json.NewDecoder(strings.NewReader(in))
		if tok, _ := dec.Token(); tok != json.Delim('{') {
			t.Fatalf("accepted a non-object: %q", in)
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, _ := dec.Token()
			k := tok.(string)
			if !names[k] || seen[k] {
				t.Fatalf("accepted member %q in %q", k, in)
			}
			seen[k] = true
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestParseTimeoutUnusable(t *testing.T) {
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
		if len(calls) != 1 || calls[0].Env.LockTimeout != DefaultLockTimeout {
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
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","Type":"tty"}`:                                                         `"Type" is not "type"`,
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","type":"tty"}`:                                                         `"type" is given twice`,
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","ARGS":{}}`:                                                            `"ARGS" is not "args"`,
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","args":{"k":1,"K":2}}`:                                                 `"K" is not "k"`,
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","args":{"cdi_spec":{"Kind":"a.com/b"}}}`:                               `"cdi_spec.Kind" is not "cdi_spec.kind"`,
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","args":{"cdi_spec":{"kind":"a.com/b"},"cdi_spec":{"kind":"a.com/c"}}}`: `"cdi_spec" is given twice`,
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","comment":"kept"}`:                                                     "",
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
