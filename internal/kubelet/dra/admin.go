package dra

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	sigsjson "sigs.k8s.io/json"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/pkg/caller"
)

// A device allocated with admin access (a monitoring or debugging pod
// beside the device's holder) is never taken from its holder: no pinned
// ADD runs, and nothing is recorded in the plugins' stores. The driver
// writes the claim's CDI spec itself, with the device nodes the plugin's
// DEVICES answer lists, in the config's cdi_spec directory and kind, named
// and owned as cdispec names a store's files, with the driver as owner
// (adminOwner), so that no plugin ever rewrites or removes it, and
// removing it never touches the holder's spec.

// adminOwner is the owner of the driver's own spec files: plugin
// "cdi-kubelet-plugin", and a store id made from the driver's name.
func (d *driver) adminOwner() cdispec.Owner {
	sum := sha256.Sum256([]byte(d.name))
	return cdispec.Owner{Plugin: "cdi-kubelet-plugin", Store: hex.EncodeToString(sum[:8])}
}

// specOf returns a config's cdi_spec arg; inventory.Configs gives every
// config one.
func specOf(conf caller.Config) (*cdispec.Config, error) {
	var c struct {
		Args json.RawMessage `json:"args"`
	}
	// The config was checked when it loaded (caller.Load); only its args
	// are wanted here.
	strict, err := sigsjson.UnmarshalStrict(conf.Raw, &c, sigsjson.DisallowDuplicateFields)
	if err == nil {
		err = errors.Join(strict...)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", conf.File, err)
	}
	spec, err := cdispec.FromArgs(c.Args)
	if err == nil && spec == nil {
		err = errors.New("no cdi_spec arg")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", conf.File, err)
	}
	return spec, nil
}

// writeAdminSpec writes the spec of the claim's admin-access devices, one
// file per cdi_spec of the configs that report them, and sets cdi[key] to
// each device's own CDI id.
func (d *driver) writeAdminSpec(uid string, keys []string, cdi map[string][]string) error {
	var confOf []int
	var devs []cdispec.Device
	for _, k := range keys {
		conf, info, ok := d.poller.Reported(k)
		if !ok {
			return fmt.Errorf("device %s (admin access): no plugin of the type reports it", k)
		}
		dev := cdispec.Device{Key: k}
		for _, n := range info.Nodes {
			dev.Nodes = append(dev.Nodes, cdispec.Stat(d.hostRoot, n))
		}
		devs, confOf = append(devs, dev), append(confOf, conf)
	}
	for _, conf := range slices.Compact(slices.Sorted(slices.Values(confOf))) {
		spec, err := specOf(d.confs[conf])
		if err != nil {
			return err
		}
		var mine []cdispec.Device
		var nodes []cdispec.Node
		for i, dev := range devs {
			if confOf[i] == conf {
				mine, nodes = append(mine, dev), append(nodes, dev.Nodes...)
			}
		}
		// The plugins refuse such hooks (ADD's 101); a spec the driver
		// writes itself carries the same container_edits.
		if err := spec.CheckHooks(d.hostRoot); err != nil {
			return fmt.Errorf("admin access: %s: %w", d.confs[conf].File, err)
		}
		if err := spec.Write(d.adminOwner(), uid, nodes, mine); err != nil {
			return fmt.Errorf("admin access: %w", err)
		}
		names := spec.QualifiedKeyNames(uid, mine)
		for _, dev := range mine {
			if id, ok := names[dev.Key]; ok {
				cdi[dev.Key] = []string{id}
			} else {
				cdi[dev.Key] = []string{spec.QualifiedName(uid)}
			}
		}
	}
	return nil
}

// removeAdminSpecs removes the driver's own spec files of a claim, in
// every cdi_spec of the type's configs; missing files are fine.
func (d *driver) removeAdminSpecs(uid string) error {
	var errs []error
	for _, conf := range d.confs {
		spec, err := specOf(conf)
		if err == nil {
			err = spec.Remove(d.adminOwner(), uid)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
