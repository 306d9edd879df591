package skel

import (
	"slices"
	"strings"

	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

// parseRequest performs the command-specific checks, the last step of
// docs/protocol.md#order-of-checks.
func (d *Dispatcher) parseRequest(about About, c *Call) error {
	switch c.Command {
	case protocol.CmdAdd, protocol.CmdDel:
		c.RequestID = d.Getenv(protocol.EnvRequestID)
		if c.RequestID == "" {
			return protocol.NewError(protocol.CodeInvalidRequest, d.notSet(protocol.EnvRequestID))
		}
		if err := request.ValidRequestID(c.RequestID); err != nil {
			return protocol.Errorf(protocol.CodeInvalidRequest, "CDI_REQUEST_ID: %w", err)
		}
	case protocol.CmdGC:
		if err := d.parseKeepOwners(c); err != nil {
			return err
		}
		return d.parseValidIDs(c)
	}
	if c.Command != protocol.CmdAdd {
		return nil
	}
	if c.Owner = d.Getenv(protocol.EnvRequestOwner); c.Owner != "" {
		if err := validOwner(c.Owner); err != nil {
			return protocol.Errorf(protocol.CodeInvalidRequest, "%s: %w", protocol.EnvRequestOwner, err)
		}
	}
	return d.parseAdd(about, c)
}

// validOwner checks an owner name: the request-id grammar (ASCII
// letters, digits and hyphens).
func validOwner(s string) error {
	return request.ValidRequestID(s)
}

// parseKeepOwners reads the optional CDI_GC_KEEP_OWNERS, a comma-separated
// list of owners (docs/protocol.md#extension-owners).
func (d *Dispatcher) parseKeepOwners(c *Call) error {
	raw := d.Getenv(protocol.EnvKeepOwners)
	if raw == "" {
		return nil
	}
	c.KeepOwners = map[string]bool{}
	for o := range strings.SplitSeq(raw, ",") {
		if o == "" {
			continue
		}
		if err := validOwner(o); err != nil {
			return protocol.Errorf(protocol.CodeInvalidRequest, "%s: %w", protocol.EnvKeepOwners, err)
		}
		c.KeepOwners[o] = true
	}
	return nil
}

// parseValidIDs reads CDI_VALID_REQUEST_IDS. An empty list is legal (it
// frees everything) only when spelled as the single word "none", so a
// variable that is merely present but empty never wipes a node.
func (d *Dispatcher) parseValidIDs(c *Call) error {
	raw := d.Getenv(protocol.EnvValidIDs)
	switch raw {
	case "":
		return protocol.NewError(protocol.CodeInvalidRequest, d.notSet(protocol.EnvValidIDs)+"; refusing to collect without a list of valid request-ids")
	case protocol.NoValidIDs:
		raw = ""
	}
	c.ValidIDs = map[string]bool{}
	for id := range strings.SplitSeq(raw, ",") {
		if id == "" {
			continue
		}
		if err := request.ValidRequestID(id); err != nil {
			return protocol.Errorf(protocol.CodeInvalidRequest, "CDI_VALID_REQUEST_IDS: %w", err)
		}
		c.ValidIDs[id] = true
	}
	return nil
}

// parseAdd reads the request and its locality: every spec is checked
// (grammar, then support) before any amount.
func (d *Dispatcher) parseAdd(about About, c *Call) error {
	raw := d.Getenv(protocol.EnvRequest)
	if raw == "" {
		return protocol.NewError(protocol.CodeInvalidRequest, d.notSet(protocol.EnvRequest))
	}
	specs, err := request.Specs(raw)
	if err != nil {
		return protocol.Errorf(protocol.CodeInvalidRequest, "CDI_REQUEST: %w", err)
	}
	for _, s := range specs {
		if s.Type != c.Config.Type || s.Subtype != "" && !slices.Contains(about.Subtypes, s.Subtype) {
			return protocol.NewError(protocol.CodeSpecUnsupported, "Unsupported resource-spec: "+s.String())
		}
	}
	if c.Request, err = request.Parse(raw); err != nil {
		return protocol.Errorf(protocol.CodeInvalidRequest, "CDI_REQUEST: %w", err)
	}
	if numa := d.Getenv(protocol.EnvNUMA); numa != "" {
		if c.Locality, err = request.ParseNUMA(numa); err != nil {
			return protocol.Errorf(protocol.CodeInvalidRequest, "CDI_REQUEST_NUMA_LOCALITY: %w", err)
		}
	}
	return d.parsePinned(about, c)
}

// parsePinned reads CDI_REQUEST_DEVICES, after every other check of the
// request: the keys must obey their grammar, and the request must hold
// exactly one item whose amount is the number of keys
// (docs/protocol.md#extension-pinned-add). A plugin with SharedKeys takes
// a key named more than once.
func (d *Dispatcher) parsePinned(about About, c *Call) error {
	raw := d.Getenv(protocol.EnvRequestDevices)
	if raw == "" {
		return nil
	}
	parse := request.ParseDeviceKeys
	if about.SharedKeys {
		parse = request.ParseSharedDeviceKeys
	}
	keys, err := parse(raw)
	if err != nil {
		return protocol.Errorf(protocol.CodeInvalidRequest, "CDI_REQUEST_DEVICES: %w", err)
	}
	items := c.Request.Items
	if len(items) != 1 {
		return protocol.Errorf(protocol.CodeInvalidRequest, "CDI_REQUEST_DEVICES needs a CDI_REQUEST of exactly one item, got %d", len(items))
	}
	if items[0].Amount != len(keys) {
		return protocol.Errorf(protocol.CodeInvalidRequest, "CDI_REQUEST_DEVICES names %d devices, CDI_REQUEST asks for %d of %s", len(keys), items[0].Amount, items[0].Spec)
	}
	c.Pinned = keys
	return nil
}
