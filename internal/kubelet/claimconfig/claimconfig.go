// Package claimconfig reads the DRA mode's per-claim settings: the opaque
// device configuration a ResourceClaim or a DeviceClass gives the driver,
//
//	{"apiVersion": "cdi-exec.io/v1alpha1", "kind": "DeviceConfig", "want_device_nodes": ["render"]}
//
// Its members besides apiVersion and kind are plugin args, by their names
// in the plugin's config, and only those args that may safely differ from
// one claim to the next (Fields). They replace the args of the node's
// config for the claim's pinned ADD, but only within it: the node's config
// (the plugin's default where it sets nothing) is an upper limit, and so is
// a DeviceClass's configuration for a claim's. A claim may narrow what it
// gets, never widen it: for a set such as want_device_nodes, its value must
// be a non-empty subset of the limit. A member that is null sets nothing
// (the claim gets the class's value, else the node's), never the plugin's
// default. Anything else fails the claim's preparation with an error that
// names the member: an unknown apiVersion or kind, a member no plugin of
// the type takes per claim, a misspelt or repeated one, a value beyond its
// limit. docs/kubernetes.md lists the fields.
package claimconfig

import (
	"bytes"
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

// field is an arg a claim may set, and how far.
type field struct {
	// def is the plugin's default: the limit where the node's config does
	// not set the arg.
	def string
	// within checks that value stays within limit (both JSON).
	within func(value, limit json.RawMessage) error
}

// perClaim lists, by plugin, the args a claim may set: those that choose
// what a device hands out, never those that choose which devices the
// node offers or how its state is kept. Each has a limit rule.
var perClaim = map[string]map[string]field{
	"drm": {"want_device_nodes": {def: `["primary","render"]`, within: subset}},
}

// subset checks that value is a non-empty list of strings, each once, each
// in the list limit.
func subset(value, limit json.RawMessage) error {
	var v, l []string
	if err := json.Unmarshal(value, &v); err != nil {
		return fmt.Errorf("%s is not a list of strings: %w", value, err)
	}
	if err := json.Unmarshal(limit, &l); err != nil {
		return fmt.Errorf("the limit %s is not a list of strings: %w", limit, err)
	}
	if len(v) == 0 {
		return fmt.Errorf("is empty; list a non-empty subset of %q", l)
	}
	for i, x := range v {
		if slices.Contains(v[:i], x) {
			return fmt.Errorf("%q is listed twice", x)
		}
		if !slices.Contains(l, x) {
			return fmt.Errorf("%q is not a subset of %q: %q is beyond it", v, l, x)
		}
	}
	return nil
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
		allowed = slices.AppendSeq(allowed, maps.Keys(perClaim[p]))
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
// later ones replacing the members they repeat, and a null member taking
// back what an earlier one of its source set. A claim's member must stay
// within the class's (the class's configurations are its limit). requests
// are the claim's requests allocated from driver ("req" or "req/subreq");
// they must all end up with the same settings, since a claim is prepared
// with one ADD per config. Apply checks the result against the node's
// config.
func ForClaim(claim *resourceapi.ResourceClaim, driver string, plugins, requests []string) (Settings, error) {
	if claim.Status.Allocation == nil || len(requests) == 0 {
		return nil, nil
	}
	class := make([]Settings, len(requests))
	own := make([]Settings, len(requests))
	for _, c := range claim.Status.Allocation.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != driver {
			continue
		}
		s, err := Parse(c.Opaque.Parameters.Raw, plugins)
		if err != nil {
			return nil, fmt.Errorf("opaque config (%s): %w", c.Source, err)
		}
		layer := own
		if c.Source == resourceapi.AllocationConfigSourceClass {
			layer = class
		}
		for i, r := range requests {
			if applies(c.Requests, r) {
				if layer[i] == nil {
					layer[i] = Settings{}
				}
				for name, v := range s {
					if isNull(v) {
						delete(layer[i], name)
					} else {
						layer[i][name] = v
					}
				}
			}
		}
	}
	per := make([]Settings, len(requests))
	for i := range requests {
		for _, name := range slices.Sorted(maps.Keys(own[i])) {
			limit, ok := class[i][name]
			if !ok {
				continue
			}
			if err := withinLimit(plugins, name, own[i][name], limit); err != nil {
				return nil, fmt.Errorf("%s from the claim: field %q: %w (the DeviceClass's)", Kind, name, err)
			}
		}
		if class[i] != nil || own[i] != nil {
			per[i] = Settings{}
			maps.Copy(per[i], class[i])
			maps.Copy(per[i], own[i])
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

// isNull reports whether a member's value is the JSON null.
func isNull(v json.RawMessage) bool {
	return string(bytes.TrimSpace(v)) == "null"
}

// withinLimit checks value of the arg name against limit by the rule of
// the first of plugins that takes name per claim.
func withinLimit(plugins []string, name string, value, limit json.RawMessage) error {
	for _, p := range plugins {
		if f, ok := perClaim[p][name]; ok {
			return f.within(value, limit)
		}
	}
	return fmt.Errorf("no plugin of %s takes it per claim", strings.Join(plugins, ", "))
}

func equal(a, b Settings) bool {
	return maps.EqualFunc(a, b, func(x, y json.RawMessage) bool { return string(x) == string(y) })
}

// Apply returns the config JSON raw, of plugin, with its args' members
// replaced by the settings that plugin takes per claim (a type's other
// plugins' settings leave it as it is). Each setting must stay within the
// config's own value, or the plugin's default where the config sets none
// (or null): the node's config is the upper limit. A config without args
// gets them.
func (s Settings) Apply(plugin string, raw []byte) ([]byte, error) {
	if len(s) == 0 {
		return raw, nil
	}
	return protocol.EditArgs(raw, func(args map[string]json.RawMessage) (bool, error) {
		changed := false
		for _, name := range slices.Sorted(maps.Keys(s)) {
			f, ok := perClaim[plugin][name]
			if !ok {
				continue
			}
			limit, ok := args[name]
			if !ok || isNull(limit) {
				limit = json.RawMessage(f.def)
			}
			if err := f.within(s[name], limit); err != nil {
				return false, fmt.Errorf("%s: field %q: %w (the node's config)", Kind, name, err)
			}
			args[name] = s[name]
			changed = true
		}
		return changed, nil
	})
}
