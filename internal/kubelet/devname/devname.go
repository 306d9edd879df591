// Package devname maps the device keys of the exec protocol (the keys a
// DEVICES answer reports and a pinned ADD names,
// docs/protocol.md#extension-pinned-add) to the names of devices in a
// Kubernetes ResourceSlice, and back.
//
// A ResourceSlice names a device by a DNS label: 1 to 63 lower-case
// letters, digits and "-", starting and ending with a letter or digit. A
// key is 1 to 64 letters, digits, "-", ".", ":" or "_". A name has one of
// three forms, told apart by how it starts:
//
//   - plain: a key of lower-case letters and digits only is its own name
//     ("tty13", "card0"). Plain names have no "-".
//   - pci: a PCI address as sysfs spells it ("0000:03:00.0",
//     request.IsPCIAddr) becomes "pci-0000-03-00-0".
//   - escaped: any other key becomes "x-" and the key with each lower-case
//     letter and digit kept and every other character written as "-" and
//     one letter or digit: "-0" for "-", "-1" for ".", "-2" for ":", "-3"
//     for "_", and "-" and the lower-case letter for an upper-case one
//     ("ttyS0" becomes "x-tty-s0").
//
// Each key has at most one name and each name at most one key: Key accepts
// only the name that Name makes. A key whose escaped form would be longer
// than 63 characters has no name; the caller leaves its device out.
package devname

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/cdi-exec/plugins/pkg/request"
)

// MaxLen is the longest device name a ResourceSlice accepts.
const MaxLen = 63

const (
	pciPrefix     = "pci-"
	escapedPrefix = "x-"
)

// pciName matches the pci form; Key checks the rest of the rule by
// making the name again.
var pciName = regexp.MustCompile(`^pci-([0-9a-f]{4})-([0-9a-f]{2})-([0-9a-f]{2})-([0-9a-f])$`)

// escapes are the characters written as "-" and a digit, in digit order.
const escapes = "-.:_"

// Name returns the device name of a key, or an error when the key has
// none (it is not a valid key, or its escaped form is too long).
func Name(key string) (string, error) {
	if err := request.ValidDeviceKey(key); err != nil {
		return "", err
	}
	if plain(key) {
		return key, nil
	}
	if request.IsPCIAddr(key) {
		return pciPrefix + strings.NewReplacer(":", "-", ".", "-").Replace(key), nil
	}
	var b strings.Builder
	b.WriteString(escapedPrefix)
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case lowerOrDigit(c):
			b.WriteByte(c)
		case c >= 'A' && c <= 'Z':
			b.WriteByte('-')
			b.WriteByte(c - 'A' + 'a')
		default:
			b.WriteByte('-')
			b.WriteByte('0' + byte(strings.IndexByte(escapes, c)))
		}
	}
	if b.Len() > MaxLen {
		return "", fmt.Errorf("device key %q: its name would be %d characters long, more than %d", key, b.Len(), MaxLen)
	}
	return b.String(), nil
}

// Key returns the key a device name stands for. It refuses every string
// that Name does not make.
func Key(name string) (string, error) {
	key, err := decode(name)
	if err != nil {
		return "", fmt.Errorf("device name %q: %w", name, err)
	}
	if canon, err := Name(key); err != nil || canon != name {
		return "", fmt.Errorf("device name %q: not the name of key %q (that is %q)", name, key, canon)
	}
	return key, nil
}

// decode undoes the form name is written in, without checking that it is
// the form Name would choose.
func decode(name string) (string, error) {
	if m := pciName.FindStringSubmatch(name); m != nil {
		return m[1] + ":" + m[2] + ":" + m[3] + "." + m[4], nil
	}
	rest, ok := strings.CutPrefix(name, escapedPrefix)
	if !ok {
		if name == "" || !plain(name) {
			return "", fmt.Errorf("not a plain, pci- or x- device name")
		}
		return name, nil
	}
	var b strings.Builder
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		switch {
		case lowerOrDigit(c):
			b.WriteByte(c)
			continue
		case c != '-' || i+1 == len(rest):
			return "", fmt.Errorf("character %q at offset %d is not allowed", c, len(escapedPrefix)+i)
		}
		i++
		switch e := rest[i]; {
		case e >= 'a' && e <= 'z':
			b.WriteByte(e - 'a' + 'A')
		case e >= '0' && int(e-'0') < len(escapes):
			b.WriteByte(escapes[e-'0'])
		default:
			return "", fmt.Errorf("escape %q at offset %d is not defined", "-"+string(e), len(escapedPrefix)+i-1)
		}
	}
	return b.String(), nil
}

func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if !lowerOrDigit(s[i]) {
			return false
		}
	}
	return len(s) <= MaxLen
}

func lowerOrDigit(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
