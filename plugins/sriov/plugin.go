package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/internal/vfio"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
)

const name = "sriov"

var about = skel.About{Name: name, Summary: "partitions SR-IOV devices into VFs and hands the VFs to containers", New: newPlugin}

// args are the sriov plugin's config args (docs/chaining.md).
type args struct {
	PFPCIAddresses   []string  `json:"pf_pci_addresses"`
	PFVendorIDs      []string  `json:"pf_vendorid_whitelist"`
	PFDeviceIDs      []string  `json:"pf_deviceid_whitelist"`
	NumVFs           int       `json:"num_vfs"`
	VFDriver         string    `json:"vf_driver"`
	DriversAutoprobe *bool     `json:"drivers_autoprobe"`
	Delegate         *delegate `json:"delegate"`
	NUMAPolicy       string    `json:"numa_policy"`
	SetupTimeout     string    `json:"setup_timeout"`
	AllowNoIOMMU     bool      `json:"allow_noiommu"`
}

// delegate is the plugin chain-loaded for the VFs handed out.
type delegate struct {
	Plugin string          `json:"plugin"`
	Args   json.RawMessage `json:"args"`
}

type plugin struct {
	host *sysfs.Host
	pool.Pool
	addrs     map[string]bool
	vendors   map[string]bool
	devices   map[string]bool
	numVFs    int
	vfDriver  string
	autoprobe *bool
	delegate  *delegate
	timeout   time.Duration
	// allowNoIOMMU hands out VFs of no-IOMMU groups too (vfio.NoIOMMU).
	allowNoIOMMU bool
}

func newPlugin(c *skel.Call) (skel.Plugin, error) {
	var a args
	spec, err := pool.Args(c.Config, &a)
	if err != nil {
		return nil, err
	}
	p := &plugin{host: sysfs.NewHost(c.Env.HostRoot), numVFs: a.NumVFs, vfDriver: a.VFDriver,
		autoprobe: a.DriversAutoprobe, delegate: a.Delegate, timeout: 10 * time.Second, allowNoIOMMU: a.AllowNoIOMMU}
	if p.addrs, err = sysfs.AddrSet("pf_pci_addresses", a.PFPCIAddresses); err != nil {
		return nil, err
	}
	if p.vendors, err = sysfs.IDSet("pf_vendorid_whitelist", a.PFVendorIDs); err != nil {
		return nil, err
	}
	if p.devices, err = sysfs.IDSet("pf_deviceid_whitelist", a.PFDeviceIDs); err != nil {
		return nil, err
	}
	if len(p.addrs) == 0 && len(p.vendors) == 0 && len(p.devices) == 0 {
		return nil, errors.New("no PF selected: set pf_pci_addresses or pf_vendorid_whitelist/pf_deviceid_whitelist")
	}
	if a.NumVFs < 1 {
		return nil, fmt.Errorf("num_vfs must be at least 1, got %d", a.NumVFs)
	}
	if strings.ContainsAny(a.VFDriver, "/\n\x00") {
		return nil, fmt.Errorf("vf_driver %q is not a driver name", a.VFDriver)
	}
	if d := a.Delegate; d != nil {
		if a.AllowNoIOMMU {
			return nil, fmt.Errorf("%s: applies to VFs handed out as their VFIO groups, not to a delegate's", vfio.AllowNoIOMMU)
		}
		if err := protocol.ValidPluginName(d.Plugin); err != nil {
			return nil, fmt.Errorf("delegate.plugin: %w", err)
		}
		if len(d.Args) > 0 && string(d.Args) != "null" {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(d.Args, &m); err != nil {
				return nil, fmt.Errorf("delegate.args must be an object: %w", err)
			}
		}
	}
	if a.SetupTimeout != "" {
		if p.timeout, err = protocol.ParseTimeout(a.SetupTimeout); err != nil {
			return nil, fmt.Errorf("setup_timeout: %w", err)
		}
	}
	strict, err := pool.StrictNUMA(a.NUMAPolicy)
	if err != nil {
		return nil, err
	}
	p.Pool = pool.Pool{Name: name, Spec: spec, Strict: strict, Discoverer: p, Setup: p, Lister: p}
	return p, nil
}

// Info reports the VFs the selected PFs provide or will provide: on a PF
// already partitioned to num_vfs, those that can be handed out now; on
// any other, the num_vfs that ADD creates.
func (p *plugin) Info(_ context.Context, c *skel.Call) (map[string]int, error) {
	if err := p.CheckHooks(c); err != nil {
		return nil, err
	}
	pfs, err := p.pfs()
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "finding PFs: %w", err)
	}
	n := 0
	for _, f := range pfs {
		if want := min(p.numVFs, f.total); f.current != want {
			n += want
		} else {
			for _, vf := range p.vfStates(f) {
				if vf.reason == "" {
					n++
				}
			}
		}
		f.dir.Close()
	}
	return map[string]int{c.Config.Type: n}, nil
}
