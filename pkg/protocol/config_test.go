package protocol

import (
	"errors"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name, in string
		err      string // "" for success
		is       error
	}{
		{"minimal", `{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm"}`, "", nil},
		{"args object", `{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","args":{"a":1}}`, "", nil},
		{"args null is absent", `{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","args":null}`, "", nil},
		{"empty", " \n", "empty", ErrEmpty},
		{"not JSON", "{", "not a JSON object", ErrNotObject},
		{"array", "[]", "not a JSON object", ErrNotObject},
		{"null", "null", "not a JSON object", ErrNotObject},
		{"missing type", `{"cdiVersion":"0.0.1","name":"x","plugin":"drm"}`, `missing required field "type"`, nil},
		{"number for a string", `{"cdiVersion":"0.0.1","name":"x","type":1,"plugin":"drm"}`, `field "type" must be a string`, nil},
		{"type grammar", `{"cdiVersion":"0.0.1","name":"x","type":"g_pu","plugin":"drm"}`, `field "type"`, nil},
		{"plugin path", `{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"../bin/sh"}`, "bare binary name", nil},
		{"plugin dot dot", `{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":".."}`, "bare binary name", nil},
		{"args array", `{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","args":[]}`, `"args" must be an object`, nil},
	}
	for _, tt := range tests {
		c, err := ParseConfig([]byte(tt.in))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err == "" && (c.Type != "gpu" || c.Plugin != "drm"):
			t.Errorf("%s: parsed %+v", tt.name, c)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.err)
		case tt.is != nil && !errors.Is(err, tt.is):
			t.Errorf("%s: error %v is not %v", tt.name, err, tt.is)
		}
	}
}

func TestValidPluginName(t *testing.T) {
	for name, ok := range map[string]bool{
		"drm": true, "generic-tty": true, "a.b": true, "...": true,
		"": false, ".": false, "..": false, "a/b": false, "/bin/sh": false, "a\x00b": false,
	} {
		if err := ValidPluginName(name); (err == nil) != ok {
			t.Errorf("ValidPluginName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestDecodeArgsStrict(t *testing.T) {
	var a struct {
		K int `json:"k"`
	}
	if err := (Config{Args: []byte(`{"k":2}`)}).DecodeArgs(&a); err != nil || a.K != 2 {
		t.Errorf("known field: %v, %+v", err, a)
	}
	if err := (Config{Args: []byte(`{"kk":2}`)}).DecodeArgs(&a); err == nil || !strings.Contains(err.Error(), "kk") {
		t.Errorf("unknown field not named: %v", err)
	}
	if err := (Config{}).DecodeArgs(&a); err != nil || a.K != 2 {
		t.Errorf("absent args changed dst: %v, %+v", err, a)
	}
}

// FuzzParseConfig checks that an accepted config has the four fields as
// strings that obey their rules, and that a refused one says why.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","args":{"k":1}}`,
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":".."}`, `[]`, ``, `{"args":[]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseConfig([]byte(s))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if ValidPluginName(c.Plugin) != nil {
			t.Fatalf("accepted plugin %q", c.Plugin)
		}
		if len(c.Args) > 0 && c.Args[0] != '{' {
			t.Fatalf("accepted args %s", c.Args)
		}
	})
}
