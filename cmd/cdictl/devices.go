package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jaypipes/pcidb"

	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// device is one row of `cdictl devices`: a device as its plugin's DEVICES
// answer gives it, with the names of its PCI ids.
type device struct {
	protocol.DeviceInfo
	Vendor  string `json:"vendor,omitempty"`  // name from the PCI ids database
	Product string `json:"product,omitempty"` // name from the PCI ids database
}

// pciNames looks PCI ids up in the host's pci.ids, loaded at most once and
// only when a PCI device is listed. This is the one place the suite parses
// pci.ids: it is slow and often missing, and never on a plugin's hot path.
type pciNames struct {
	root   string
	loaded bool
	db     *pcidb.DB
	note   func(string)
}

func (p *pciNames) lookup(vendor, product string) (string, string) {
	if !p.loaded {
		p.loaded = true
		for _, rel := range []string{"usr/share/hwdata/pci.ids", "usr/share/misc/pci.ids"} {
			path := filepath.Join(p.root, rel)
			if _, err := os.Stat(path); err != nil {
				continue
			}
			db, err := pcidb.New(pcidb.WithPath(path))
			if err == nil {
				p.db = db
				break
			}
		}
		if p.db == nil {
			p.note(fmt.Sprintf("no PCI ids database (pci.ids) under %s: showing ids only", p.root))
		}
	}
	if p.db == nil {
		return "", ""
	}
	v, ok := p.db.Vendors[strings.TrimPrefix(vendor, "0x")]
	if !ok {
		return "", ""
	}
	for _, prod := range v.Products {
		if prod.ID == strings.TrimPrefix(product, "0x") {
			return v.Name, prod.Name
		}
	}
	return v.Name, ""
}

func devicesCommand() *command {
	return &command{name: "devices", complete: completeType, args: "[TYPE]", summary: "every device each plugin sees: ids, names, NUMA, usable or why not, holder",
		example: "cdictl devices\n  cdictl devices -o table gpu", setup: noFlags((*app).devices), empty: "devices"}
}

// devicesEntry is one plugin's inventory. NoInventory marks a plugin that
// has none of its own: it answered DEVICES with code 3 (unsupported).
type devicesEntry struct {
	outcome
	NoInventory bool     `json:"noInventory,omitempty"`
	Devices     []device `json:"devices"`
}

// devices lists what every configured plugin sees, as the plugins' DEVICES
// answers give it (cdictl reads no sysfs itself), with the names of the
// PCI ids they report from pci.ids when the host has it.
func (a *app) devices(args []string) int {
	types, ok := a.typeArg(args)
	if !ok {
		return exitUsage
	}
	confs, err := a.configs(types...)
	if err != nil {
		return a.fail(err)
	}
	names := &pciNames{root: a.cfg.HostRoot, note: func(s string) { fmt.Fprintf(a.stderr, "cdictl: %s\n", s) }}
	out, failed := callEach(a, confs, func(conf caller.Config, e *devicesEntry) error {
		e.Devices = []device{}
		list, has, err := a.inventory(conf)
		e.NoInventory = !has
		for _, d := range list {
			row := device{DeviceInfo: d}
			if d.VendorID != "" {
				row.Vendor, row.Product = names.lookup(strings.ToLower(d.VendorID), strings.ToLower(d.DeviceID))
			}
			e.Devices = append(e.Devices, row)
		}
		return err
	})
	a.report("TYPE\tPLUGIN\tDEVICE\tNODES\tID\tNAME\tNUMA\tSWITCH\tSTATE", func() [][]string { return deviceRows(out) },
		rawjson.Field{Key: "cdiVersion", Value: protocol.Latest}, rawjson.Field{Key: "plugins", Value: out})
	return a.status(failed)
}

// inventory asks one plugin for its DEVICES answer. has is false when the
// plugin has no inventory of its own (code 3, unsupported), which is no
// failure.
func (a *app) inventory(conf caller.Config) (devs []protocol.DeviceInfo, has bool, err error) {
	r, err := a.caller().Extension(a.ctx(), conf, protocol.CmdDevices)
	var pe *caller.PluginError
	if errors.As(err, &pe) && pe.Code() == protocol.CodeCommandUnsupported {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	if err := json.Unmarshal(r.Object["devices"], &devs); err != nil {
		return nil, true, fmt.Errorf("%s: DEVICES answer: %w", conf.Plugin, err)
	}
	return devs, true, nil
}

// deviceRows is the table of devices: one row per device, and one per
// plugin that failed.
func deviceRows(out []devicesEntry) [][]string {
	var rows [][]string
	for _, e := range out {
		switch {
		case e.Error != nil:
			rows = append(rows, []string{e.Type, e.Plugin, "-", "-", "-", "-", "-", "-", e.Error.String()})
		case e.NoInventory:
			rows = append(rows, []string{e.Type, e.Plugin, "-", "-", "-", "-", "-", "-", "no inventory (DEVICES unsupported)"})
		}
		for _, d := range e.Devices {
			id := strings.Trim(d.VendorID+":"+d.DeviceID, ":")
			if id == "" {
				id = strings.Trim(d.USBVendor+":"+d.USBProduct, ":") // a USB device's ids
			}
			name := strings.TrimSpace(d.Vendor + " " + d.Product)
			if id == "" {
				id = "-"
			}
			if name == "" {
				name = "-"
			}
			numa := "-"
			if d.NUMA >= 0 {
				numa = fmt.Sprint(d.NUMA)
			}
			state := "free"
			switch {
			case d.HeldBy != "":
				state = "held by " + d.HeldBy
			case !d.Usable:
				state = "unusable: " + d.Reason
			case d.Unlimited && len(d.Holders) > 0:
				state = fmt.Sprintf("%d of unlimited shares held by %s", len(d.Holders), shareHolders(d.Holders))
			case d.Unlimited:
				state = "free (unlimited shares)"
			case d.Shares > 1 && len(d.Holders) > 0:
				state = fmt.Sprintf("%d of %d shares held by %s", len(d.Holders), d.Shares, shareHolders(d.Holders))
			case d.Shares > 1:
				state = fmt.Sprintf("free (%d shares)", d.Shares)
			}
			rows = append(rows, []string{e.Type, e.Plugin, d.Key, strings.Join(d.Nodes, " "), id, name, numa, dash(d.PCIeSwitch), state})
		}
	}
	return rows
}

// shareHolders names the holders of a shared unit's shares, each once in
// share order, with the number of shares it holds when more than one:
// holders has an entry per held share ("a, b (2), c (5)").
func shareHolders(holders []string) string {
	var ids []string
	n := map[string]int{}
	for _, h := range holders {
		if n[h] == 0 {
			ids = append(ids, h)
		}
		n[h]++
	}
	for i, id := range ids {
		if n[id] > 1 {
			ids[i] = fmt.Sprintf("%s (%d)", id, n[id])
		}
	}
	return strings.Join(ids, ", ")
}
