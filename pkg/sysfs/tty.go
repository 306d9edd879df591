package sysfs

import (
	"os"
	"slices"
)

// TTY is a tty device of one family, such as tty13 or ttyUSB2.
type TTY struct {
	Name  string // kernel name, for example "tty13"
	Index int    // the number after the family prefix
}

// TTYs lists the ttys of the family prefix ("tty", "ttyS", "ttyUSB", ...)
// found in /sys/class/tty, in numeric order. Only names that are exactly
// prefix + number match, so "tty" does not pick up "ttyS0".
func (h Host) TTYs(prefix string) ([]TTY, error) {
	entries, err := os.ReadDir(h.Sys("class", "tty"))
	if err != nil {
		return nil, err
	}
	var out []TTY
	for _, e := range entries {
		if n, ok := Index(e.Name(), prefix); ok {
			out = append(out, TTY{Name: e.Name(), Index: n})
		}
	}
	slices.SortFunc(out, func(a, b TTY) int { return a.Index - b.Index })
	return out, nil
}

// TTYNode resolves the /dev node of a tty.
func (h Host) TTYNode(t TTY) (string, error) {
	return h.Node(h.Sys("class", "tty", t.Name), t.Name)
}
