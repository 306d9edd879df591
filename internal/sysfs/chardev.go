package sysfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// CheckCharNode checks that /dev/<devname> is a character device numbered
// want ("major:minor", as /proc/devices and the driver's documentation
// give it); an empty want checks the type alone. A missing entry is an
// error that matches fs.ErrNotExist; anything else in its place (a link,
// a regular file, another device) is an error saying what it is.
func (h *Host) CheckCharNode(devname, want string) error {
	return h.checkChar(devname, want, "", "the kernel")
}

// checkChar is CheckCharNode, naming where want came from in its error.
// With sysDir and no want, want is the dev attribute of sysDir, read once
// the node is known to be a character device.
func (h *Host) checkChar(devname, want, sysDir, source string) error {
	var st unix.Stat_t
	p := h.Dev(devname)
	if err := unix.Lstat(p, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return fmt.Errorf("/dev/%s is not a character device (mode %#o)", devname, st.Mode&unix.S_IFMT)
	}
	if want == "" && sysDir != "" {
		var err error
		if want, err = ReadAttr(filepath.Join(sysDir, "dev")); err != nil {
			return err
		}
	}
	if want == "" {
		return nil
	}
	if got := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)); got != want {
		return fmt.Errorf("/dev/%s is device %s, but %s says %s", devname, got, source, want)
	}
	return nil
}

// CharMajors reads the character device majors the kernel lists in
// /proc/devices, by driver name ("nvidia-uvm" → 510). A host without the
// file has none.
func (h *Host) CharMajors() (map[string]int, error) {
	b, err := os.ReadFile(h.Proc("devices"))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]int{}, nil
	}
	if err != nil {
		return nil, err
	}
	return ParseCharMajors(b), nil
}

// ParseCharMajors reads the "Character devices:" section of /proc/devices:
// lines of a major number and a name. Lines of another shape are skipped;
// a name listed twice keeps its first major.
func ParseCharMajors(b []byte) map[string]int {
	out := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	in := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			in = true
			continue
		case strings.HasSuffix(line, ":"):
			in = false
			continue
		case !in:
			continue
		}
		num, name, ok := strings.Cut(line, " ")
		name = strings.TrimSpace(name)
		major, err := strconv.Atoi(num)
		if !ok || err != nil || major < 0 || major > 4095 || name == "" {
			continue
		}
		if _, seen := out[name]; !seen {
			out[name] = major
		}
	}
	return out
}
