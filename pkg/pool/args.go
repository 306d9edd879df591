package pool

import (
	"bytes"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// Args decodes a config's args into dst strictly (protocol.Config.DecodeArgs),
// except for the cdi_spec arg that every pool plugin accepts without
// declaring it: that one is taken out, validated, and returned; nil when
// absent.
func Args(c protocol.Config, dst any) (*cdispec.Config, error) {
	spec, err := takeSpec(&c)
	if err != nil {
		return nil, err
	}
	if err := c.DecodeArgs(dst); err != nil {
		return nil, err
	}
	return spec, nil
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
