package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/cdi-exec/plugins/internal/chardev"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// args are the generic plugin's config args (docs/plugins.md#generic).
type args struct {
	// Rules select the devices, in order: a node that several rules
	// select belongs to the first.
	Rules []ruleArgs `json:"rules"`
	// NUMAPolicy is "preferred" (default) or "strict".
	NUMAPolicy string `json:"numa_policy"`
}

// ruleArgs is one rule as the config writes it.
type ruleArgs struct {
	// Paths are globs of device nodes under /dev ("/dev/ttyUSB*").
	Paths []string `json:"paths"`
	// Class and Names select class devices: /sys/class/<class>/<name>,
	// names by glob (default every name).
	Class string   `json:"class"`
	Names []string `json:"names"`
	// USB keeps only nodes that hang off a USB device with these
	// descriptors.
	USB *usbArgs `json:"usb"`
	// Group is "node" (default: each node a unit), "usb" (the nodes of
	// one USB device are one unit) or "pci" (those of one PCI function).
	Group string `json:"group"`
	// Shares is how many requests may hold a unit at once: a number
	// (default 1) or "unlimited" (shares).
	Shares json.RawMessage `json:"shares"`
	// Permissions are the CDI device-node permissions of the unit's
	// nodes: "r", "w", "m" in that order ("rw", "rwm"); default the
	// runtime's, "rwm".
	Permissions string `json:"permissions"`
}

// usbArgs are a rule's USB filters, compared with the USB device's
// idVendor, idProduct and serial attributes.
type usbArgs struct {
	Vendor  string  `json:"vendor"`
	Product string  `json:"product"`
	Serial  *string `json:"serial"`
}

// maxShares bounds a rule's shares: each is a store slot.
const maxShares = 1024

// config is the validated args.
type config struct {
	rules  []chardev.Rule
	strict bool
}

// configError is an error about one member of the args: the plugin's
// answer names it as args.<path>, which `cdictl validate` turns into the
// line and column of the config file (docs/plugins.md#generic).
func configError(member string, err error) error {
	return protocol.Errorf(protocol.CodeInvalidConfig, "args.%s: %w", member, err)
}

func (a args) validate() (config, error) {
	var cfg config
	var err error
	if cfg.strict, err = pool.StrictNUMA(a.NUMAPolicy); err != nil {
		return cfg, skel.ArgsError(err)
	}
	if len(a.Rules) == 0 {
		return cfg, configError("rules", errors.New("missing or empty: list at least one rule"))
	}
	seen := map[string]string{} // selector → the member that made it
	for i, ra := range a.Rules {
		at := fmt.Sprintf("rules[%d]", i)
		r, err := ra.validate(at)
		if err != nil {
			return cfg, err
		}
		// Two rules with the same selector and filter contradict each
		// other (or one never applies): refused.
		for j, sel := range selectors(r) {
			member := fmt.Sprintf("%s.paths[%d]", at, j)
			if r.Class != "" {
				member = fmt.Sprintf("%s.names[%d]", at, j)
				if ra.Names == nil {
					member = at + ".class"
				}
			}
			if prev, ok := seen[sel]; ok {
				return cfg, configError(member, fmt.Errorf("selects the same devices as %s: a node belongs to one rule", prev))
			}
			seen[sel] = member
		}
		cfg.rules = append(cfg.rules, r)
	}
	return cfg, nil
}

// selectors are the rule's selections with its USB filter, one per glob,
// for finding rules that select the same.
func selectors(r chardev.Rule) []string {
	filter := ""
	if r.USB != nil {
		filter = "|" + r.USB.Vendor + ":" + r.USB.Product
		if r.USB.Serial != nil {
			filter += ":" + *r.USB.Serial
		}
	}
	var out []string
	for _, p := range r.Paths {
		out = append(out, "path:"+p+filter)
	}
	for _, n := range r.Names {
		out = append(out, "class:"+r.Class+"/"+n+filter)
	}
	return out
}

func (ra ruleArgs) validate(at string) (chardev.Rule, error) {
	r := chardev.Rule{Class: ra.Class, Group: ra.Group, Shares: 1, Permissions: ra.Permissions}
	switch {
	case ra.Paths != nil && ra.Class != "":
		return r, configError(at+".class", errors.New(`a rule selects by "paths" or by "class", not both`))
	case ra.Paths == nil && ra.Class == "":
		return r, configError(at, errors.New(`a rule needs "paths" (globs under /dev) or "class" (a sysfs class)`))
	case ra.Paths != nil && len(ra.Paths) == 0:
		return r, configError(at+".paths", errors.New("empty: list at least one glob under /dev"))
	case ra.Names != nil && ra.Class == "":
		return r, configError(at+".names", errors.New(`"names" selects within a "class"; this rule has none`))
	case ra.Names != nil && len(ra.Names) == 0:
		return r, configError(at+".names", errors.New(`empty: leave "names" out to select every name of the class`))
	}
	var err error
	for j, p := range ra.Paths {
		rel, err := devGlob(p)
		if err != nil {
			return r, configError(fmt.Sprintf("%s.paths[%d]", at, j), err)
		}
		r.Paths = append(r.Paths, rel)
	}
	if ra.Class != "" {
		if !validName(ra.Class) {
			return r, configError(at+".class", fmt.Errorf("%q is not a sysfs class name such as \"video4linux\"", ra.Class))
		}
		r.Names = ra.Names
		if r.Names == nil {
			r.Names = []string{"*"}
		}
		for j, n := range r.Names {
			if err := nameGlob(n); err != nil {
				return r, configError(fmt.Sprintf("%s.names[%d]", at, j), err)
			}
		}
	}
	if ra.USB != nil {
		u := *ra.USB
		if u.Vendor, err = usbID(u.Vendor); err != nil {
			return r, configError(at+".usb.vendor", err)
		}
		if u.Product, err = usbID(u.Product); err != nil {
			return r, configError(at+".usb.product", err)
		}
		if u.Serial != nil && *u.Serial == "" {
			return r, configError(at+".usb.serial", errors.New(`empty: leave "serial" out to match any`))
		}
		if u.Vendor == "" && u.Product == "" && u.Serial == nil {
			return r, configError(at+".usb", errors.New(`empty: give "vendor", "product" or "serial"`))
		}
		r.USB = &chardev.USB{Vendor: u.Vendor, Product: u.Product, Serial: u.Serial}
	}
	switch ra.Group {
	case "":
		r.Group = chardev.GroupNode
	case chardev.GroupNode, chardev.GroupUSB, chardev.GroupPCI:
	default:
		return r, configError(at+".group", fmt.Errorf("%q is not %q, %q or %q", ra.Group, chardev.GroupNode, chardev.GroupUSB, chardev.GroupPCI))
	}
	if r.Shares, err = shares(ra.Shares); err != nil {
		return r, configError(at+".shares", err)
	}
	if ra.Permissions != "" && !validPermissions(ra.Permissions) {
		return r, configError(at+".permissions", fmt.Errorf("%q is not CDI device permissions: some of r, w, m, in that order, such as \"rw\"", ra.Permissions))
	}
	return r, nil
}

// unlimited is the shares arg that lets any number of requests hold a
// unit at once.
const unlimited = "unlimited"

// shares parses a rule's shares arg: a whole number from 1 to maxShares,
// or "unlimited" (chardev.Unlimited); absent or null is 1.
func shares(raw json.RawMessage) (int, error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || string(v) == "null" {
		return 1, nil
	}
	if v[0] == '"' {
		var str string
		if err := json.Unmarshal(v, &str); err == nil && str == unlimited {
			return chardev.Unlimited, nil
		}
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 1 || n > maxShares {
		return 0, fmt.Errorf("%s is not from 1 to %d or %q", v, maxShares, unlimited)
	}
	return n, nil
}

// devGlob checks a path glob under /dev and returns it relative to /dev.
func devGlob(p string) (string, error) {
	rel, ok := strings.CutPrefix(p, "/dev/")
	switch {
	case !ok || rel == "":
		return "", fmt.Errorf("%q is not a path under /dev, such as \"/dev/ttyUSB*\"", p)
	case path.Clean(p) != p || strings.Contains(p, "/../") || strings.HasSuffix(p, "/.."):
		return "", fmt.Errorf("%q is not a clean path (no \"..\", \".\", \"//\" or trailing \"/\")", p)
	case strings.ContainsRune(p, 0):
		return "", fmt.Errorf("%q holds a NUL byte", p)
	}
	if _, err := path.Match(rel, ""); err != nil {
		return "", fmt.Errorf("%q is not a valid glob: %w", p, err)
	}
	return rel, nil
}

// nameGlob checks a glob of class device names.
func nameGlob(n string) error {
	if n == "" || strings.ContainsAny(n, "/\x00") || n == "." || n == ".." {
		return fmt.Errorf("%q is not a glob of device names such as \"video*\"", n)
	}
	if _, err := path.Match(n, ""); err != nil {
		return fmt.Errorf("%q is not a valid glob: %w", n, err)
	}
	return nil
}

// validName reports whether s is a sysfs class name: letters, digits,
// "_" and "-".
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// usbID normalises a USB id: four hex digits, any case, an optional
// "0x"; "" stays "" (no filter).
func usbID(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	id := strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X"))
	if len(id) != 4 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%q is not a USB id: four hex digits, such as \"1a86\"", s)
	}
	return id, nil
}

// validPermissions reports whether s is some of "r", "w", "m", in that
// order, each once.
func validPermissions(s string) bool {
	rest := s
	for _, c := range []string{"r", "w", "m"} {
		rest = strings.TrimPrefix(rest, c)
	}
	return rest == "" && s != ""
}
