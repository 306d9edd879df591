package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// NUMANodes lists the NUMA nodes the kernel registered
// (/sys/devices/system/node/node<N>), ascending; nil on a host without NUMA
// information, as in many VMs.
func (h *Host) NUMANodes() ([]int, error) {
	names, err := readDirNames(h.Sys("devices", "system", "node"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, name := range names {
		if n, ok := Index(name, "node"); ok {
			ids = append(ids, n)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// NUMADistances reads the kernel's NUMA distance matrix: d[from][to], 10
// for a node to itself. Each node<N>/distance file is node N's row: its
// distances to each online node, in ascending order (the kernel's
// node_read_distance). The matrix is nil, without error, when the host has
// no node directories or any node lacks its distance file; an error tells
// of a file that is there but malformed.
func (h *Host) NUMADistances() (map[int]map[int]int, error) {
	ids, err := h.NUMANodes()
	if err != nil || ids == nil {
		return nil, err
	}
	cols := ids
	if b, err := readFile(h.Sys("devices", "system", "node", "online")); err == nil {
		if cols, err = ParseList(trim(b)); err != nil {
			return nil, fmt.Errorf("%s: %w", h.Sys("devices", "system", "node", "online"), err)
		}
	}
	d := make(map[int]map[int]int, len(ids))
	for _, id := range ids {
		path := filepath.Join(h.nodeDir(id), "distance")
		b, err := readFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		row, err := parseRow(trim(b), len(cols))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		d[id] = make(map[int]int, len(cols))
		for i, to := range cols {
			d[id][to] = row[i]
		}
	}
	return d, nil
}

// parseRow parses a distance file: want space-separated distances, each
// 1 to 255 as ACPI's SLIT allows.
func parseRow(s string, want int) ([]int, error) {
	f := strings.Fields(s)
	if len(f) != want {
		return nil, fmt.Errorf("%d distances for %d online nodes", len(f), want)
	}
	row := make([]int, len(f))
	for i, v := range f {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 255 {
			return nil, fmt.Errorf("distance %q is not a number from 1 to 255", v)
		}
		row[i] = n
	}
	return row, nil
}

// maxListItem bounds the numbers of a list ("0-3,8") and their count: CPU
// and node ids stay far below it, and a hostile file cannot make a huge
// list.
const maxListItem = 1 << 16

// ParseList parses the kernel's list format, as in node/online or
// cpulist: comma-separated numbers and inclusive ranges, "0-3,8,10-11".
// An empty string is an empty list.
func ParseList(s string) ([]int, error) {
	var out []int
	if s == "" {
		return out, nil
	}
	for item := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := listItem(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = listItem(hi); err != nil {
				return nil, err
			}
		}
		if b < a {
			return nil, fmt.Errorf("range %q runs backwards", item)
		}
		if len(out)+b-a >= maxListItem {
			return nil, fmt.Errorf("more than %d numbers", maxListItem)
		}
		for n := a; n <= b; n++ {
			out = append(out, n)
		}
	}
	return out, nil
}

func listItem(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > maxListItem || s[0] == '+' {
		return 0, fmt.Errorf("%q is not a number from 0 to %d", s, maxListItem)
	}
	return n, nil
}

// FormatList writes ascending numbers in the kernel's list format,
// "0-3,8".
func FormatList(ns []int) string {
	var b strings.Builder
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ns[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(ns[j]))
		}
		i = j + 1
	}
	return b.String()
}

// nodeDir is the sysfs directory of a NUMA node.
func (h *Host) nodeDir(id int) string {
	return filepath.Join(h.Sys("devices", "system", "node"), fmt.Sprintf("node%d", id))
}
