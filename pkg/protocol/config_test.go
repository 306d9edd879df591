package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/internal/rawjson/jsonref"
	"github.com/cdi-exec/plugins/pkg/request"
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
		{"twice", `{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","x":1,"x":2}`, `field "x" is given twice`, nil},
		{"twice after escapes", `{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","n\u0061me":"y"}`, `field "name" is given twice`, nil},
		{"case", `{"cdiVersion":"0.0.1","name":"x","type":"gpu","Plugin":"drm"}`, `field "Plugin" is not "plugin"`, nil},
		{"unknown members ignored", `{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","z":[{}]}`, "", nil},
		{"trailing data", `{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm"} {}`, "not a JSON object", ErrNotObject},
		{"string", `"gpu"`, "not a JSON object", ErrNotObject},
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

// A top-level member within edit distance 2 of a known one is kept as a
// near miss, so callers and plugins can warn; a missing field says which
// member was probably meant.
func TestParseConfigNearMisses(t *testing.T) {
	const base = `"cdiVersion":"0.0.1","name":"x","type":"gpu"`
	tests := []struct {
		name, in string
		want     []NearMiss
		err      string
	}{
		{"arg for args", `{` + base + `,"plugin":"drm","arg":{"vendorid_whitelist":["0x10de"]}}`, []NearMiss{{"arg", "args"}}, ""},
		{"two", `{` + base + `,"plugin":"drm","argz":{},"nmae":"y"}`, []NearMiss{{"argz", "args"}, {"nmae", "name"}}, ""},
		{"far from every member", `{` + base + `,"plugin":"drm","capabilities":{}}`, nil, ""},
		{"plugins for plugin", `{` + base + `,"plugins":"drm"}`, nil, `missing required field "plugin" (there is "plugins": a typo?)`},
	}
	for _, tt := range tests {
		c, err := ParseConfig([]byte(tt.in))
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("%s: error %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(c.NearMisses, tt.want) {
			t.Errorf("%s: %v, %v; want %v", tt.name, c.NearMisses, err, tt.want)
		}
	}
	if got := (NearMiss{"arg", "args"}).String(); got != `unknown member "arg" is ignored; did you mean "args"?` {
		t.Errorf("String: %s", got)
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
// strings that obey their rules, that a refused one says why, and that
// ParseConfig agrees with parseConfigJSON, which reads the config with
// encoding/json.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":"drm","args":{"k":1}}`,
		`{"cdiVersion":"0.0.1","name":"x","type":"gpu","plugin":".."}`, `[]`, ``, `{"args":[]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseConfig([]byte(s))
		agree(t, []byte(s), c, err)
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

func TestParseConfigAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range []string{
		`{"cdiVersion":"0.0.2","name":"\u00e9\ud800","type":"gpu","plugin":"drm","args": {"a" : [1, {"b":null}] } }`,
		"{\"cdiVersion\":\"0.0.2\",\"name\":\"a\xffb\",\"type\":\"gpu\",\"plugin\":\"drm\"}",
		`{"cdiVersion":"0.0.2","name":"x","type":"gpu","plugin":"drm","argſ":{}}`,
		`{"cdiVersion":"0.0.2","name":"x","type":"gpu","plugin":"drm","args":null}`,
		`{"cdiVersion":"0.0.2","name":"x","type":"gpu","plugin":"drm","args":"{}"}`,
		`{"cdiVersion":1,"name":"x"}`, `null`, `[{}]`, `{"a":1,"a":2}`, "\f", `{`,
	} {
		c, err := ParseConfig([]byte(s))
		agree(t, []byte(s), c, err)
	}
}

// agree fails unless ParseConfig's result c, err for b is what
// parseConfigJSON gives. Both refuse the same inputs. For valid JSON they
// give the same error, except in how they word "not an object"; for
// invalid JSON ParseConfig reports the syntax, where the reference may
// first have seen a member given twice.
func agree(t *testing.T, b []byte, c Config, err error) {
	t.Helper()
	want, wantErr := parseConfigJSON(b)
	switch {
	case (err == nil) != (wantErr == nil):
		t.Fatalf("ParseConfig(%q) = %v; encoding/json says %v", b, err, wantErr)
	case err == nil && (c.CDIVersion != want.CDIVersion || c.Name != want.Name || c.Type != want.Type ||
		c.Plugin != want.Plugin || !bytes.Equal(c.Args, want.Args)):
		t.Fatalf("ParseConfig(%q) = %+v; encoding/json gives %+v", b, c, want)
	case err == nil:
	case errors.Is(err, ErrEmpty) != errors.Is(wantErr, ErrEmpty):
		t.Fatalf("ParseConfig(%q): %v; encoding/json: %v", b, err, wantErr)
	case !json.Valid(b) && !errors.Is(err, ErrNotObject) && !errors.Is(err, ErrEmpty):
		t.Fatalf("ParseConfig(%q): %v for invalid JSON", b, err)
	case json.Valid(b) && errors.Is(err, ErrNotObject) != errors.Is(wantErr, ErrNotObject):
		t.Fatalf("ParseConfig(%q): %v; encoding/json: %v", b, err, wantErr)
	case json.Valid(b) && !errors.Is(err, ErrNotObject) && err.Error() != wantErr.Error():
		t.Fatalf("ParseConfig(%q): %q; encoding/json: %q", b, err, wantErr)
	}
}

// parseConfigJSON is ParseConfig written with encoding/json, the reference
// the fuzz target holds ParseConfig to.
func parseConfigJSON(b []byte) (Config, error) {
	if err := jsonref.CheckMembers(b, reflect.TypeFor[Config](), "", true); err != nil {
		return Config{}, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || raw == nil {
		if len(bytes.TrimSpace(b)) == 0 {
			return Config{}, ErrEmpty
		}
		return Config{}, fmt.Errorf("%w: %v", ErrNotObject, err)
	}
	var c Config
	for i, dst := range []*string{&c.CDIVersion, &c.Name, &c.Type, &c.Plugin} {
		name := configFields[i]
		v, ok := raw[name]
		if !ok {
			return Config{}, fmt.Errorf("missing required field %q", name)
		}
		if err := json.Unmarshal(v, dst); err != nil || v[0] != '"' {
			return Config{}, fmt.Errorf("field %q must be a string", name)
		}
	}
	if err := request.ValidType(c.Type); err != nil {
		return Config{}, fmt.Errorf("field \"type\": %w", err)
	}
	if err := ValidPluginName(c.Plugin); err != nil {
		return Config{}, fmt.Errorf("field \"plugin\": %w", err)
	}
	if a, ok := raw["args"]; ok && string(a) != "null" {
		if a[0] != '{' {
			return Config{}, errors.New(`field "args" must be an object`)
		}
		c.Args = a
	}
	return c, nil
}
