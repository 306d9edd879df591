package sysfs

import "slices"

// TTY is a tty device of one family, such as tty13 or ttyUSB2.
type TTY struct {
	Name  string // kernel name, for example "tty13"
	Index int    // the number after the family prefix
}

// TTYs lists the ttys of the family prefix ("tty", "ttyS", "ttyUSB", ...)
// found in /sys/class/tty, in numeric order. Only names that are exactly
// prefix + number match, so "tty" does not pick up "ttyS0".
func (h *Host) TTYs(prefix string) ([]TTY, error) {
	names, err := readDirNames(h.Sys("class", "tty"))
	if err != nil {
		return nil, err
	}
	var out []TTY
	for _, name := range names {
		if n, ok := Index(name, prefix); ok {
			out = append(out, TTY{Name: name, Index: n})
		}
	}
	slices.SortFunc(out, func(a, b TTY) int { return a.Index - b.Index })
	return out, nil
}

// Usable reports whether the tty's /dev node is a character device.
func (h *Host) Usable(t TTY) bool { return h.NodeExists(t.Name) }

// TTYNode resolves and checks the /dev node of a tty (ResolveNode).
func (h *Host) TTYNode(t TTY) (string, error) {
	return h.ResolveNode(h.Sys("class", "tty", t.Name), t.Name)
}
