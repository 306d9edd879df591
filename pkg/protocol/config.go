package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cdi-exec/plugins/internal/nearmiss"
	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/request"
)

// Config is a plugin config: the JSON a caller keeps in
// <conf-dir>/<type>.d/*.conf and passes to the plugin on stdin.
type Config struct {
	CDIVersion string          `json:"cdiVersion"`
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Plugin     string          `json:"plugin"`
	Args       json.RawMessage `json:"args,omitempty"`
	// NearMisses lists the top-level members that are not the config's
	// own but within an edit distance of 2 of one (such as "arg" for
	// "args"). The protocol allows unknown members, so they are no error,
	// but a typo would silently drop what it meant: callers and plugins
	// warn about them (NearMiss.String).
	NearMisses []NearMiss `json:"-"`
}

// MemberError is an error about one member of a config, which it names, so
// that a caller can point at it in the file.
type MemberError = rawjson.MemberError

// NearMiss is an unknown config member whose name is close to a known one.
type NearMiss struct {
	Name  string // as given
	Known string // the member it probably means
}

func (m NearMiss) String() string {
	return fmt.Sprintf("unknown member %q is ignored; did you mean %q?", m.Name, m.Known)
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
// object. A member given twice, or spelled like one of these in another
// case, is an error that names it; other members are ignored. It does not
// check the version (callers and plugins differ in what they do with one
// they do not support).
//
// Plugins parse a config on every call, so this reads the JSON without
// reflection (internal/rawjson); it accepts and decodes what encoding/json does.
func ParseConfig(b []byte) (Config, error) {
	v, err := rawjson.Value(b)
	if err != nil {
		if len(bytes.TrimSpace(b)) == 0 {
			return Config{}, ErrEmpty
		}
		return Config{}, fmt.Errorf("%w: %w", ErrNotObject, err)
	}
	var found [len(configFields)][]byte
	var near []NearMiss
	err = rawjson.UniqueMembers(v, "", func(name string, value []byte) error {
		for i, f := range configFields {
			switch {
			case name == f:
				found[i] = value
				return nil
			case strings.EqualFold(name, f):
				return &MemberError{Name: name, Err: rawjson.CaseError("", name, f)}
			}
		}
		if known, ok := nearmiss.Closest(name, configFields[:]); ok {
			near = append(near, NearMiss{Name: name, Known: known})
		}
		return nil
	})
	if errors.Is(err, rawjson.ErrNotObject) {
		return Config{}, fmt.Errorf("%w: the input is %s", ErrNotObject, kind(v))
	} else if err != nil {
		return Config{}, err
	}
	c, err := configFrom(found, near)
	c.NearMisses = near
	return c, err
}

// configFields are the config's members, in the order they are checked;
// args is last.
var configFields = [...]string{"cdiVersion", "name", "type", "plugin", "args"}

// configFrom checks the raw members of a config, indexed as configFields.
// A missing field that a near miss probably means is named with it.
func configFrom(m [len(configFields)][]byte, near []NearMiss) (Config, error) {
	var c Config
	for i, dst := range []*string{&c.CDIVersion, &c.Name, &c.Type, &c.Plugin} {
		if m[i] == nil {
			for _, n := range near {
				if n.Known == configFields[i] {
					return Config{}, fmt.Errorf("missing required field %q (there is %q: a typo?)", configFields[i], n.Name)
				}
			}
			return Config{}, fmt.Errorf("missing required field %q", configFields[i])
		}
		s, err := rawjson.String(m[i])
		if err != nil {
			return Config{}, &MemberError{Name: configFields[i], Err: fmt.Errorf("field %q must be a string", configFields[i])}
		}
		*dst = s
	}
	if err := request.ValidType(c.Type); err != nil {
		return Config{}, &MemberError{Name: "type", Err: fmt.Errorf("field \"type\": %w", err)}
	}
	if err := ValidPluginName(c.Plugin); err != nil {
		return Config{}, &MemberError{Name: "plugin", Err: fmt.Errorf("field \"plugin\": %w", err)}
	}
	if a := m[len(m)-1]; a != nil && string(a) != "null" {
		if a[0] != '{' {
			return Config{}, &MemberError{Name: "args", Err: errors.New(`field "args" must be an object`)}
		}
		c.Args = bytes.Clone(a)
	}
	return c, nil
}

// kind names the kind of the JSON value v for an error message.
func kind(v []byte) string {
	switch v[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
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
	return rawjson.DecodeStrict(c.Args, dst)
}

// EditArgs decodes the config JSON raw, lets edit change its args'
// members (an empty map for a config without args), and encodes the
// config again with them. When edit reports no change, raw comes back as
// it is. Callers that adjust a config before running a plugin (the
// Kubernetes modes' cdi_spec, a claim's settings) share it.
func EditArgs(raw []byte, edit func(args map[string]json.RawMessage) (bool, error)) ([]byte, error) {
	var conf map[string]json.RawMessage
	if err := json.Unmarshal(raw, &conf); err != nil {
		return nil, err
	}
	args := map[string]json.RawMessage{}
	if a, ok := conf["args"]; ok && string(a) != "null" {
		if err := json.Unmarshal(a, &args); err != nil {
			return nil, fmt.Errorf("args: %w", err)
		}
	}
	changed, err := edit(args)
	if err != nil {
		return nil, err
	}
	if !changed {
		return raw, nil
	}
	if conf["args"], err = json.Marshal(args); err != nil {
		return nil, err
	}
	return json.Marshal(conf)
}
