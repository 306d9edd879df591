// Package unixsock holds the one rule every unix socket path obeys: the
// kernel's sun_path holds 108 bytes with the terminating NUL, so a path
// has at most 107. A longer one fails to bind or dial with "invalid
// argument"; Check says why instead.
package unixsock

import "fmt"

// MaxPath is the longest path a unix socket can have on Linux.
const MaxPath = 107

// Check refuses a socket path longer than MaxPath, naming it and its
// length.
func Check(path string) error {
	if len(path) > MaxPath {
		return fmt.Errorf("socket path %s is %d bytes long, more than a unix socket can have (%d)", path, len(path), MaxPath)
	}
	return nil
}
