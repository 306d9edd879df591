package cdispec

import (
	"encoding/json"
	"fmt"

	"github.com/cdi-exec/plugins/internal/rawjson"
)

// FromArgs returns the cdi_spec member of a plugin config's args, parsed
// and validated, or nil when the args have none. It is how a caller that
// reads configs (cdictl ls) knows what a plugin publishes under them.
func FromArgs(args json.RawMessage) (*Config, error) {
	if len(args) == 0 {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := rawjson.DecodeStrict(args, &m); err != nil {
		return nil, fmt.Errorf("args: %w", err)
	}
	raw, ok := m["cdi_spec"]
	if !ok {
		return nil, nil
	}
	return Parse(raw)
}
