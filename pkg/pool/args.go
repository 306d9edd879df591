package pool

import (
	"bytes"
	"encoding/json"

	"github.com/cdi-exec/plugins/pkg/cdispec"
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
	var args map[string]json.RawMessage
	if err := json.Unmarshal(c.Args, &args); err != nil {
		return nil, err
	}
	delete(args, "cdi_spec")
	if c.Args, err = json.Marshal(args); err != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "args: %w", err)
	}
	return spec, nil
}
