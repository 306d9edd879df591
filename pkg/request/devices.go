package request

import (
	"fmt"
	"strings"
)

// MaxDeviceKeyLen bounds a device key of CDI_REQUEST_DEVICES.
const MaxDeviceKeyLen = 64 // key = 1*64( ALPHA / DIGIT / "-" / "." / ":" / "_" )

// ValidDeviceKey checks one device key of a pinned ADD: 1 to 64 ASCII
// letters, digits, "-", ".", ":" or "_", such as "tty13" or "0000:03:00.0".
func ValidDeviceKey(s string) error {
	const part = "device key"
	switch {
	case s == "":
		return &Error{Part: part, Value: s, Reason: "empty"}
	case len(s) > MaxDeviceKeyLen:
		return &Error{Part: part, Value: s, Reason: fmt.Sprintf("longer than %d characters", MaxDeviceKeyLen)}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isAlnum(c) || c == '-' || c == '.' || c == ':' || c == '_' {
			continue
		}
		return &Error{Part: part, Value: s, Reason: fmt.Sprintf("character %q at offset %d is not allowed", c, i)}
	}
	return nil
}

// ParseDeviceKeys parses a CDI_REQUEST_DEVICES value: key *("," key), with
// no empty items and no key listed twice. The keys keep their order.
func ParseDeviceKeys(s string) ([]string, error) {
	return parseDeviceKeys(s, false)
}

// ParseSharedDeviceKeys parses a CDI_REQUEST_DEVICES value as
// ParseDeviceKeys does, but lets a key be listed more than once: for a
// plugin whose devices several requests may hold at once (DEVICES'
// shares), each time names one more share of the device.
func ParseSharedDeviceKeys(s string) ([]string, error) {
	return parseDeviceKeys(s, true)
}

func parseDeviceKeys(s string, repeats bool) ([]string, error) {
	if s == "" {
		return nil, &Error{Part: "device list", Value: s, Reason: "empty"}
	}
	keys := strings.Split(s, ",")
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if err := ValidDeviceKey(k); err != nil {
			return nil, err
		}
		if seen[k] && !repeats {
			return nil, &Error{Part: "device list", Value: s, Reason: fmt.Sprintf("device key %q appears more than once", k)}
		}
		seen[k] = true
	}
	return keys, nil
}

// IsPCIAddr reports whether s is a full PCI address dddd:bb:dd.f in lower
// case hex: the key of every device that is a PCI function.
func IsPCIAddr(s string) bool {
	if len(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return false
	}
	for i, c := range []byte(s) {
		if i == 4 || i == 7 || i == 10 {
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s[11] <= '7' && s[8] <= '1'
}
