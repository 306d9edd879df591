package skel

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// answer calls the plugin for the call's command and renders its success
// answer (docs/protocol.md#replies).
func answer(ctx context.Context, plugin Plugin, c *Call) ([]rawjson.Field, error) {
	switch c.Command {
	case protocol.CmdInfo:
		caps, err := plugin.Info(ctx, c)
		if err != nil {
			return nil, err
		}
		if caps[c.Config.Type] == 0 {
			warnHostRoot(c)
		}
		return capacityFields(c, caps)
	case protocol.CmdAdd:
		res, err := plugin.Add(ctx, c)
		if err != nil {
			return nil, err
		}
		return addFields(c, res), nil
	case protocol.CmdDel:
		return nil, plugin.Del(ctx, c)
	case protocol.CmdDevices:
		devs, err := plugin.(Inventorier).Devices(ctx, c)
		if err != nil {
			return nil, err
		}
		if len(devs) == 0 {
			warnHostRoot(c)
		}
		return []rawjson.Field{{Key: "cdiVersion", Value: c.Version}, {Key: "devices", Value: rawjson.NonNil(devs)}}, nil
	}
	res, err := plugin.(Collector).GC(ctx, c) // the only command left
	if err != nil {
		return nil, err
	}
	out := []rawjson.Field{{Key: "cdiVersion", Value: c.Version}, {Key: "freed", Value: rawjson.NonNil(res.Freed)}}
	if len(res.Errors) > 0 {
		out = append(out, rawjson.Field{Key: "errors", Value: res.Errors})
	}
	return out, nil
}

// warnHostRoot warns, when a plugin found nothing, if that is because
// CDI_HOST_ROOT is no host's root (protocol.Env.HostRootProblem).
func warnHostRoot(c *Call) {
	if err := c.Env.HostRootProblem(); err != nil {
		c.Warnf("%v", err)
	}
}

// addFields renders an ADD answer: numa_locality only when it was asked
// for, cdiDevices only when there are some, cdiKeyDevices when some
// device has its own.
func addFields(c *Call, res *AddResult) []rawjson.Field {
	out := []rawjson.Field{{Key: "cdiVersion", Value: c.Version}, {Key: "devices", Value: rawjson.NonNil(res.Devices)}}
	if c.Locality != nil {
		out = append(out, rawjson.Field{Key: "numa_locality", Value: rawjson.NonNil(res.NUMA)})
	}
	if len(res.CDIDevices) > 0 {
		out = append(out, rawjson.Field{Key: "cdiDevices", Value: res.CDIDevices})
	}
	if len(res.CDIKeyDevices) > 0 {
		out = append(out, rawjson.Field{Key: "cdiKeyDevices", Value: res.CDIKeyDevices})
	}
	return out
}

// capacityFields renders an INFO answer: cdiVersion, the type, then any
// subtypes in name order. Keys outside the config's type are refused.
func capacityFields(c *Call, caps map[string]int) ([]rawjson.Field, error) {
	out := []rawjson.Field{{Key: "cdiVersion", Value: c.Version}, {Key: c.Config.Type, Value: caps[c.Config.Type]}}
	keys := make([]string, 0, len(caps))
	for k := range caps {
		if k == c.Config.Type {
			continue
		}
		if !strings.HasPrefix(k, c.Config.Type+"-") {
			return nil, protocol.Errorf(protocol.CodeInternal, "plugin reported capacity for %q outside type %q", k, c.Config.Type)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, rawjson.Field{Key: k, Value: caps[k]})
	}
	return out, nil
}

// fail prints err as a protocol error object and returns the exit status:
// 1, except for DEL, which always exits 0.
func (d *Dispatcher) fail(c *Call, err error) int {
	e := protocol.AsError(err)
	fields := []rawjson.Field{{Key: "cdiVersion", Value: c.Version}, {Key: "code", Value: e.Code}, {Key: "msg", Value: e.Msg}}
	if e.Details != "" {
		fields = append(fields, rawjson.Field{Key: "details", Value: e.Details})
	}
	status := 1
	if c.Command == protocol.CmdDel {
		status = 0
	}
	return d.print(status, fields)
}

// print writes fields as the single JSON object of this invocation. A nil
// fields prints nothing.
func (d *Dispatcher) print(status int, fields []rawjson.Field) int {
	if fields == nil {
		return status
	}
	b, err := rawjson.EncodeObject(fields)
	if err != nil {
		fmt.Fprintf(d.Stderr, "encoding reply: %v\n", err)
		return status
	}
	if _, err := d.Stdout.Write(b); err != nil {
		fmt.Fprintf(d.Stderr, "writing reply: %v\n", err)
	}
	return status
}
