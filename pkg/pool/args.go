package pool

import (
	"bytes"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// Spec is a config's cdi_spec arg, validated: a Pool whose Spec is set
// publishes each allocation as a CDI spec file (docs/cdi-bridge.md). Only
// Args makes one; a nil *Spec publishes nothing.
type Spec struct {
	c *cdispec.Config
}

// Kind is the CDI kind of the published devices, "<vendor>/<class>"; ""
// for a nil Spec.
func (s *Spec) Kind() string {
	if s == nil {
		return ""
	}
	return s.c.Kind
}

// Dir is the directory the spec files are written to; "" for a nil Spec.
func (s *Spec) Dir() string {
	if s == nil {
		return ""
	}
	return s.c.Dir
}

// config is the parsed arg; nil for a nil Spec (whose methods publish
// nothing and check nothing).
func (s *Spec) config() *cdispec.Config {
	if s == nil {
		return nil
	}
	return s.c
}

// Args decodes a config's args into dst strictly (protocol.Config.DecodeArgs),
// except for the cdi_spec arg that every pool plugin accepts without
// declaring it: that one is taken out, validated, and returned for
// Pool.Spec; nil when absent.
func Args(c protocol.Config, dst any) (*Spec, error) {
	spec, err := takeSpec(&c)
	if err != nil {
		return nil, err
	}
	if err := c.DecodeArgs(dst); err != nil {
		return nil, err
	}
	if spec == nil {
		return nil, nil
	}
	return &Spec{c: spec}, nil
}

// takeSpec removes cdi_spec from c's args and parses it.
func takeSpec(c *protocol.Config) (*cdispec.Config, error) {
	if !bytes.Contains(c.Args, []byte(`"cdi_spec"`)) {
		return nil, nil
	}
	spec, err := cdispec.FromArgs(c.Args)
	if err != nil || spec == nil {
		return nil, err
	}
	c.Args, err = without(c.Args, "cdi_spec")
	return spec, err
}

// without returns the object args without its member name.
func without(args []byte, name string) ([]byte, error) {
	out := append(make([]byte, 0, len(args)), '{')
	err := rawjson.Members(args, func(n string, value []byte) error {
		if n == name {
			return nil
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = rawjson.AppendString(out, n)
		out = append(out, ':')
		out = append(out, value...)
		return nil
	})
	return append(out, '}'), err
}
