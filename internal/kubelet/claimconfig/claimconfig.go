// Package claimconfig reads the DRA mode's per-claim settings: the opaque
// device configuration a ResourceClaim or a DeviceClass gives the driver,
//
//	{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "want_device_nodes": ["render"]}
//
// Its members besides apiVersion and kind are plugin args, by their names
// in the plugin's config, and only those args that may safely differ from
// one claim to the next (Fields). They replace the args of the node's
// config for the claim's pinned ADD. Anything else fails the claim's
// preparation with an error that names the member: an unknown apiVersion
// or kind, a member no plugin of the type takes per claim, a misspelt or
// repeated one. docs/kubernetes.md lists the fields.
package claimconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	sigsjson "sigs.k8s.io/json"

	"github.com/cdi-exec/plugins/pkg/protocol"
)

// The apiVersion and kind of the driver's opaque configuration.
const (
	APIVersion = "cdi-exec.io/v1alpha1"
	Kind       = "DeviceConfig"
)

// perClaim lists, by plugin, the args a claim may set: those that choose
// what a device hands out, never those that choose which devices the
// node offers or how its state is kept.
var perClaim = map[string][]string{
	"drm": {"want_device_nodes"},
}

// Settings are the args a claim sets, by name, as raw JSON.
type Settings map[string]json.RawMessage

// Parse decodes one opaque configuration for a type served by plugins,
// checking every member against what those plugins take per claim.
func Parse(raw []byte, plugins []string) (Settings, error) {
	var m map[string]json.RawMessage
	if err := strict(raw, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", Kind, err)
	}
	if m == nil {
		return nil, fmt.Errorf("%s: null is not an object", Kind)
	}
	var apiVersion, kind string
	for name, dst := range map[string]*string{"apiVersion": &apiVersion, "kind": &kind} {
		if v, ok := m[name]; ok {
			if err := strict(v, dst); err != nil {
				return nil, fmt.Errorf("%s: field %q: %w", Kind, name, err)
			}
		}
	}
	if apiVersion != APIVersion {
		return nil, fmt.Errorf("field \"apiVersion\": %q is not %q", apiVersion, APIVersion)
	}
	if kind != Kind {
		return nil, fmt.Errorf("field \"kind\": %q is not %q", kind, Kind)
	}
	delete(m, "apiVersion")
	delete(m, "kind")
	var allowed []string
	for _, p := range plugins {
		allowed = append(allowed, perClaim[p]...)
	}
	slices.Sort(allowed)
	allowed = slices.Compact(allowed)
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(allowed, name) {
			return nil, fmt.Errorf("%s: field %q cannot be set per claim for plugins %s (fields: %s)",
				Kind, name, strings.Join(plugins, ", "), orNone(allowed))
		}
	}
	return Settings(m), nil
}

// strict decodes data into v with sigs.k8s.io/json: names match exactly,
// and a member given twice, or one v has no field for, is an error that
// names it. The daemon runs long, so the reflection's start-up cost that
// keeps the plugins on their hand-written decoders does not matter here.
func strict(data []byte, v any) error {
	errs, err := sigsjson.UnmarshalStrict(data, v)
	if err != nil {
		return err
	}
	return errors.Join(errs...)
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// ForClaim returns the settings of the claim's allocation for driver:
// each opaque configuration for driver, the class's first and the claim's
// after them, each over the requests it names (all when it names none),
// later ones replacing the members they repeat. requests are the claim's
// requests allocated from driver ("req" or "req/subreq"); they must all
// end up with the same settings, since a claim is prepared with one ADD
// per config.
func ForClaim(claim *resourceapi.ResourceClaim, driver string, plugins, requests []string) (Settings, error) {
	if claim.Status.Allocation == nil || len(requests) == 0 {
		return nil, nil
	}
	per := make([]Settings, len(requests))
	for _, c := range claim.Status.Allocation.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != driver {
			continue
		}
		s, err := Parse(c.Opaque.Parameters.Raw, plugins)
		if err != nil {
			return nil, fmt.Errorf("opaque config (%s): %w", c.Source, err)
		}
		for i, r := range requests {
			if applies(c.Requests, r) {
				if per[i] == nil {
					per[i] = Settings{}
				}
				maps.Copy(per[i], s)
			}
		}
	}
	for i := range requests[1:] {
		if !equal(per[0], per[i+1]) {
			return nil, fmt.Errorf("requests %q and %q have different %s settings; the driver prepares a claim with one ADD per plugin config, so they must agree", requests[0], requests[i+1], Kind)
		}
	}
	return per[0], nil
}

// applies reports whether a config for names covers request ("req" or
// "req/subreq"): every request when names is empty, else the request or
// its parent by name.
func applies(names []string, request string) bool {
	if len(names) == 0 {
		return true
	}
	parent, _, _ := strings.Cut(request, "/")
	return slices.Contains(names, request) || slices.Contains(names, parent)
}

func equal(a, b Settings) bool {
	return maps.EqualFunc(a, b, func(x, y json.RawMessage) bool { return string(x) == string(y) })
}

// Apply returns the config JSON raw with its args' members replaced by
// the settings. A config without args gets them.
func (s Settings) Apply(raw []byte) ([]byte, error) {
	if len(s) == 0 {
		return raw, nil
	}
	return protocol.EditArgs(raw, func(args map[string]json.RawMessage) (bool, error) {
		maps.Copy(args, s)
		return true, nil
	})
}
