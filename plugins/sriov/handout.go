package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/internal/vfio"
	"github.com/cdi-exec/plugins/pkg/invoke"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// Handout binds the chosen VFs to vf_driver when configured, then gets
// their nodes from the delegate, or their VFIO groups.
func (p *plugin) Handout(ctx context.Context, c *skel.Call, item request.Item, chosen []pool.Device) (pool.Handout, error) {
	addrs := make([]string, len(chosen))
	for i, d := range chosen {
		addrs[i] = d.Key
	}
	if p.vfDriver != "" {
		for _, a := range addrs {
			if err := p.bind(ctx, a); err != nil {
				return pool.Handout{}, err
			}
		}
		// The binds made the groups' nodes: /dev is read afresh, not
		// from what judging the VFs listed before.
		p.host.Forget()
	}
	if p.delegate == nil {
		nodes, err := p.vfio(addrs)
		return pool.Handout{Nodes: nodes}, err
	}
	devices, err := p.delegateAdd(ctx, c, item, addrs)
	if err != nil {
		return pool.Handout{}, err
	}
	undo := func(ctx context.Context) {
		if err := p.delegateDel(ctx, c, p.delegate.Plugin, c.RequestID, addrs); err != nil {
			c.Warnf("rolling back delegate %s: %v", p.delegate.Plugin, err)
		}
	}
	return pool.Handout{Nodes: devices, Delegate: p.delegate.Plugin, Undo: undo}, nil
}

// bind makes sure a VF is bound to vf_driver, through driver_override and
// a probe, each bounded by the setup timeout.
func (p *plugin) bind(ctx context.Context, addr string) error {
	dir := p.host.PCIDir(addr)
	d, err := sysfs.OpenDir(dir)
	if err != nil {
		return protocol.Errorf(protocol.CodeSetup, "VF %s: %w", addr, err)
	}
	defer d.Close()
	if d.LinkBase("driver") == p.vfDriver {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if err := sysfs.WriteAttr(ctx, dir+"/driver_override", p.vfDriver); err != nil {
		return protocol.Errorf(protocol.CodeSetup, "VF %s: %w", addr, err)
	}
	if d.LinkBase("driver") != "" {
		if err := sysfs.WriteAttr(ctx, dir+"/driver/unbind", addr); err != nil {
			return protocol.Errorf(protocol.CodeSetup, "VF %s: %w", addr, err)
		}
	}
	if err := sysfs.WriteAttr(ctx, p.host.Sys("bus", "pci", "drivers_probe"), addr); err != nil {
		return protocol.Errorf(protocol.CodeSetup, "VF %s: %w", addr, err)
	}
	err = sysfs.WaitFor(ctx, fmt.Sprintf("%s bound to %s", addr, p.vfDriver), func() bool {
		return d.LinkBase("driver") == p.vfDriver
	})
	if err != nil {
		return protocol.Errorf(protocol.CodeSetup, "VF %s: %w", addr, err)
	}
	return nil
}

// vfio returns each VF's VFIO group node, then the container node. Each VF
// must be bound to vfio-pci (or vf_driver), as its driver link says.
func (p *plugin) vfio(addrs []string) ([]string, error) {
	var nodes []string
	for _, a := range addrs {
		d, err := sysfs.OpenDir(p.host.PCIDir(a))
		if err != nil {
			return nil, protocol.Errorf(protocol.CodeSetup, "VF %s: %w", a, err)
		}
		group, drv := vfio.GroupOf(d), d.LinkBase("driver")
		d.Close()
		if group == "" {
			return nil, protocol.Errorf(protocol.CodeSetup, "VF %s has no IOMMU group (is the IOMMU enabled?)", a)
		}
		if drv != p.wantDriver() {
			return nil, protocol.Errorf(protocol.CodeSetup, "VF %s is bound to %q, not %s", a, drv, p.wantDriver())
		}
		node := vfio.GroupNode(p.host, group)
		if node == "" {
			return nil, protocol.Errorf(protocol.CodeSetup, "VF %s: no /dev/vfio/%s; is it bound to vfio-pci?", a, group)
		}
		if vfio.NoIOMMU(p.host, group) && !p.allowNoIOMMU {
			return nil, protocol.Errorf(protocol.CodeSetup, "VF %s: %s", a, vfio.RefuseNoIOMMU(group, false))
		}
		if !slices.Contains(nodes, node) {
			nodes = append(nodes, node)
		}
	}
	if !p.host.NodeExists("vfio/vfio") {
		return nil, protocol.Errorf(protocol.CodeSetup, "%s does not exist (is vfio loaded?)", vfio.Container)
	}
	return append(nodes, vfio.Container), nil
}

// delegateConfig is the config the delegate gets: its args plus the VFs in
// pci_addresses, under our type and version.
func (p *plugin) delegateConfig(c *skel.Call, plugin string, addrs []string) ([]byte, error) {
	args := map[string]any{}
	if p.delegate != nil && p.delegate.Plugin == plugin && len(p.delegate.Args) > 0 && string(p.delegate.Args) != "null" {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(p.delegate.Args, &m); err != nil {
			return nil, err
		}
		for k, v := range m {
			args[k] = v
		}
	}
	args["pci_addresses"] = addrs
	return json.Marshal(map[string]any{
		"cdiVersion": c.Version,
		"name":       c.Config.Name + " (delegate)",
		"type":       c.Config.Type,
		"plugin":     plugin,
		"args":       args,
	})
}

func (p *plugin) runDelegate(ctx context.Context, c *skel.Call, plugin, id string, addrs []string, env ...string) (*invoke.Reply, error) {
	conf, err := p.delegateConfig(c, plugin, addrs)
	if err != nil {
		return nil, err
	}
	env = append(env, protocol.EnvVersion+"="+c.Version, protocol.EnvRequestID+"="+id)
	return invoke.Run(ctx, invoke.Call{Plugin: plugin, Path: c.Env.Path, Env: env, Config: conf})
}

// delegateAdd runs the delegate's ADD for the chosen VFs. A pinned ADD
// pins the delegate to the same VFs, in the same order.
func (p *plugin) delegateAdd(ctx context.Context, c *skel.Call, item request.Item, addrs []string) ([]string, error) {
	pinned := ""
	if c.Pinned != nil {
		pinned = strings.Join(addrs, ",")
	}
	r, err := p.runDelegate(ctx, c, p.delegate.Plugin, c.RequestID, addrs, protocol.EnvCommand+"="+protocol.CmdAdd,
		fmt.Sprintf("%s=%s:%d", protocol.EnvRequest, item.Spec, len(addrs)), protocol.EnvNUMA+"="+request.FormatNUMA(c.Locality),
		protocol.EnvRequestDevices+"="+pinned)
	if err != nil {
		return nil, delegateError(p.delegate.Plugin, err)
	}
	var devices []string
	if err := json.Unmarshal(r.Object["devices"], &devices); err != nil {
		return nil, protocol.Errorf(protocol.CodeDelegate, "delegate %s: answer has no devices list: %s", p.delegate.Plugin, r.Raw)
	}
	return devices, nil
}

// delegateDel runs the delegate's DEL; an unknown request-id is fine.
func (p *plugin) delegateDel(ctx context.Context, c *skel.Call, plugin, id string, addrs []string) error {
	_, err := p.runDelegate(ctx, c, plugin, id, addrs, protocol.EnvCommand+"="+protocol.CmdDel, protocol.EnvRequest+"=", protocol.EnvNUMA+"=", protocol.EnvRequestDevices+"=")
	var pe *invoke.Error
	if errors.As(err, &pe) && pe.Code == protocol.CodeUnknownRequestID {
		return nil
	}
	if err != nil {
		return delegateError(plugin, err)
	}
	return nil
}

// Teardown sends DEL to the delegates of a record before it is deleted.
func (p *plugin) Teardown(ctx context.Context, c *skel.Call, rec pool.Record) error {
	var errs []error
	for _, a := range rec.Allocations {
		if a.Delegate == "" {
			continue
		}
		if err := p.delegateDel(ctx, c, a.Delegate, rec.ID, a.Keys); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// delegateError is code 108 with the delegate's own error in details.
func delegateError(plugin string, err error) error {
	var pe *invoke.Error
	if errors.As(err, &pe) {
		b, _ := json.Marshal(pe)
		return protocol.Errorf(protocol.CodeDelegate, "delegate %s failed: %s", plugin, b)
	}
	return protocol.Errorf(protocol.CodeDelegate, "delegate %s failed: %v", plugin, err)
}
