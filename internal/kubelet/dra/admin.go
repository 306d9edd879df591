package dra

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
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
func (lc *lifecycle) adminOwner() cdispec.Owner {
	sum := sha256.Sum256([]byte(lc.name))
	return cdispec.Owner{Plugin: "cdi-kubelet-plugin", Store: hex.EncodeToString(sum[:8])}
}

// writeAdminSpec writes the spec of the claim's admin-access devices, one
// file per cdi_spec of the configs that report them, and sets cdi[key] to
// each device's own CDI id.
func (lc *lifecycle) writeAdminSpec(uid string, keys []string, cdi map[string][]string) error {
	var confOf []int
	var devs []cdispec.Device
	for _, k := range keys {
		conf, info, ok := lc.poller.Reported(k)
		if !ok {
			return fmt.Errorf("device %s (admin access): no plugin of the type reports it", k)
		}
		dev := cdispec.Device{Key: k}
		for _, n := range info.Nodes {
			dev.Nodes = append(dev.Nodes, cdispec.Stat(lc.hostRoot, n))
		}
		devs, confOf = append(devs, dev), append(confOf, conf)
	}
	for _, conf := range slices.Compact(slices.Sorted(slices.Values(confOf))) {
		spec, err := inventory.Spec(lc.confs[conf])
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
		if err := spec.CheckHooks(lc.hostRoot); err != nil {
			return fmt.Errorf("admin access: %s: %w", lc.confs[conf].File, err)
		}
		if err := spec.Write(lc.adminOwner(), uid, nodes, mine); err != nil {
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
func (lc *lifecycle) removeAdminSpecs(uid string) error {
	var errs []error
	for _, conf := range lc.confs {
		spec, err := inventory.Spec(conf)
		if err == nil {
			err = spec.Remove(lc.adminOwner(), uid)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
