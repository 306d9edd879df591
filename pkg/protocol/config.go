package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/cdi-exec/plugins/pkg/abnf"
)

// Config is a plugin config: the JSON a caller keeps in
// <conf-dir>/<type>.d/*.conf and passes to the plugin on stdin.
type Config struct {
	CDIVersion string          `json:"cdiVersion"`
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Plugin     string          `json:"plugin"`
	Args       json.RawMessage `json:"args,omitempty"`
}

// ErrNotObject is wrapped by ParseConfig when the input is not one JSON
// object; ErrEmpty when it holds nothing but white space.
var (
	ErrNotObject = errors.New("not a JSON object")
	ErrEmpty     = errors.New("empty")
)

// ParseConfig decodes a config and checks its required fields: cdiVersion,
// name, type and plugin are strings, type obeys the resource-type grammar,
// plugin is a bare binary name, and args, when present and not null, is an
// object. It does not check the version (callers and plugins differ in
// what they do with one they do not support).
func ParseConfig(b []byte) (Config, error) {
	if err := CheckMembers(b, reflect.TypeFor[Config]()); err != nil {
		return Config{}, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || raw == nil {
		if len(bytes.TrimSpace(b)) == 0 {
			return Config{}, ErrEmpty
		}
		if err == nil {
			err = errors.New("not an object")
		}
		return Config{}, fmt.Errorf("%w: %v", ErrNotObject, err)
	}
	var c Config
	for _, f := range []struct {
		name string
		dst  *string
	}{{"cdiVersion", &c.CDIVersion}, {"name", &c.Name}, {"type", &c.Type}, {"plugin", &c.Plugin}} {
		v, ok := raw[f.name]
		if !ok {
			return Config{}, fmt.Errorf("missing required field %q", f.name)
		}
		if err := json.Unmarshal(v, f.dst); err != nil || v[0] != '"' {
			return Config{}, fmt.Errorf("field %q must be a string", f.name)
		}
	}
	if err := abnf.ValidType(c.Type); err != nil {
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

// ValidPluginName checks that name is a bare binary name: not empty, not
// "." or "..", without "/" or NUL. Plugins are looked up only in the
// CDI_PATH directories, so a config can never point outside them.
func ValidPluginName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%q is not a bare binary name", name)
	}
	return nil
}

// DecodeArgs decodes the config's args into dst strictly (DecodeStrict): an
// unknown field, a field spelled in another case and a field given twice
// are errors that name it, so a typo never silently widens what a plugin
// hands out. Absent args leave dst unchanged.
func (c Config) DecodeArgs(dst any) error {
	if len(c.Args) == 0 {
		return nil
	}
	return DecodeStrict(c.Args, dst)
}
