// Package protocol holds what both sides of the CDI exec protocol share:
// the versions, the commands, the environment variables and their
// defaults, the plugin config, the error codes with their fixed messages,
// and the shapes of the answers. Plugins (through pkg/skel) and callers
// (pkg/invoke, pkg/caller, cmd/cdictl) use it; it runs nothing itself.
//
// The decisions it encodes are in docs/protocol.md.
package protocol

import "slices"

// Latest is the newest protocol version this suite speaks.
const Latest = "0.0.2"

// SupportedVersions returns the protocol versions every plugin accepts,
// oldest first.
func SupportedVersions() []string { return []string{"0.0.1", "0.0.2"} }

// Supported reports whether v is a supported protocol version.
func Supported(v string) bool { return slices.Contains(SupportedVersions(), v) }

// Commands, the values of CDI_COMMAND. Plugins match them
// ASCII case-insensitively (Command).
const (
	CmdVersion = "VERSION"
	CmdInfo    = "INFO"
	CmdAdd     = "ADD"
	CmdDel     = "DEL"
	CmdGC      = "GC"      // extension, docs/protocol.md#extension-gc
	CmdDevices = "DEVICES" // extension, docs/protocol.md#extension-devices
)

// Command normalises a CDI_COMMAND value for matching: ASCII letters are
// upper-cased and nothing else is changed. strings.ToUpper would map
// "ınfo" (dotless i) to INFO and "verſion" (long s) to VERSION.
func Command(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
