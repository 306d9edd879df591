package cache

import (
	"encoding/binary"
	"errors"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/internal/dirent"
)

// Stamp is the state of the host's device listings at one moment, as far
// as the cache needs it to tell whether facts scanned then still hold.
type Stamp struct {
	boot   string
	seq    uint64
	hasSeq bool
	times  []int64 // modification time of each Watch.Dev directory, ns; -1 when missing
	racy   bool    // a time was too recent to prove anything
	sys    []listing
	dev    []listing
}

// listing identifies the entries of a directory: their number and an
// order-independent hash of their names, inode numbers and types. kernfs
// and devtmpfs give a re-created entry a new inode number, so a device
// that went and came back under the same name changes it too.
type listing struct {
	n, sum uint64
}

// missing is the listing of a directory that does not exist.
var missing = listing{n: 1 << 63}

// quick takes the cheap part of a stamp: boot id, sequence number and
// /dev times. It reports false for a host that cannot be cached.
func (c *Cache) quick() (*Stamp, bool) {
	var buf [64]byte // on the stack: a fresh heap span costs a page fault
	boot, err := readSmall(c.watch.Boot, buf[:])
	if err != nil || len(boot) == 0 {
		return nil, false
	}
	st := &Stamp{boot: trimID(boot)}
	if b, err := readSmall(c.watch.Seqnum, buf[:]); err == nil {
		st.seq, st.hasSeq = parseUint(b)
	}
	now := time.Now().UnixNano()
	for _, d := range c.watch.Dev {
		var fi unix.Stat_t
		t := int64(-1)
		if err := unix.Stat(d, &fi); err == nil {
			t = fi.Mtim.Nano()
		}
		if t >= 0 && now-t < int64(racy) {
			st.racy = true
		}
		st.times = append(st.times, t)
	}
	return st, true
}

// listed adds the listings to a quick stamp; nil when a directory cannot
// be read.
func (c *Cache) listed(st *Stamp) *Stamp {
	if st == nil {
		return nil
	}
	st.sys, st.dev = st.sys[:0], st.dev[:0]
	for _, d := range c.watch.Sys {
		l, err := c.list(d)
		if err != nil {
			return nil
		}
		st.sys = append(st.sys, l)
	}
	for _, d := range c.watch.Dev {
		l, err := c.list(d)
		if err != nil {
			return nil
		}
		st.dev = append(st.dev, l)
	}
	return st
}

// same reports whether the quick parts of two stamps prove that nothing
// the watch covers changed between them.
func (st *Stamp) same(old *Stamp) bool {
	if st.boot != old.boot || !st.hasSeq || !old.hasSeq || st.seq != old.seq || old.racy || len(st.times) != len(old.times) {
		return false
	}
	for i, t := range st.times {
		if t != old.times[i] {
			return false
		}
	}
	return true
}

// sameLists reports whether every watched directory lists the same
// entries in both stamps.
func (st *Stamp) sameLists(old *Stamp) bool {
	return equal(st.sys, old.sys) && equal(st.dev, old.dev)
}

func equal(a, b []listing) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// list computes the listing of a directory.
func (c *Cache) list(dir string) (listing, error) {
	ls := c.watch.List
	if ls == nil {
		ls = dirent.List
	}
	var l listing
	err := ls(dir, func(name []byte, ino uint64, typ uint8) {
		// FNV-1a over the name, then the inode number and type; summed,
		// so that the order of the entries does not matter.
		h := uint64(14695981039346656037)
		for _, c := range name {
			h = (h ^ uint64(c)) * 1099511628211
		}
		for i := range 8 {
			h = (h ^ (ino >> (8 * i) & 0xff)) * 1099511628211
		}
		h = (h ^ uint64(typ)) * 1099511628211
		l.n++
		l.sum += h
	})
	if errors.Is(err, unix.ENOENT) {
		return missing, nil
	}
	return l, err
}

func (st *Stamp) append(b []byte) []byte {
	b = appendString(b, st.boot)
	var flags byte
	if st.hasSeq {
		flags |= 1
	}
	if st.racy {
		flags |= 2
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint64(b, st.seq)
	b = binary.AppendUvarint(b, uint64(len(st.times)))
	for _, t := range st.times {
		b = binary.LittleEndian.AppendUint64(b, uint64(t))
	}
	for _, ls := range [][]listing{st.sys, st.dev} {
		b = binary.AppendUvarint(b, uint64(len(ls)))
		for _, l := range ls {
			b = binary.LittleEndian.AppendUint64(b, l.n)
			b = binary.LittleEndian.AppendUint64(b, l.sum)
		}
	}
	return b
}

func (r *reader) stamp() *Stamp {
	st := &Stamp{boot: r.string()}
	if len(r.b) < 1 {
		r.fail()
		return st
	}
	flags := r.b[0]
	r.b = r.b[1:]
	st.hasSeq, st.racy = flags&1 != 0, flags&2 != 0
	st.seq = r.u64()
	st.times = make([]int64, r.count())
	for i := range st.times {
		st.times[i] = int64(r.u64())
	}
	for _, ls := range []*[]listing{&st.sys, &st.dev} {
		*ls = make([]listing, r.count())
		for i := range *ls {
			(*ls)[i] = listing{n: r.u64(), sum: r.u64()}
		}
	}
	return st
}

// count reads a length that must fit what is left of the file.
func (r *reader) count() int {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return 0
	}
	return int(n)
}

// readSmall reads a small kernel attribute into buf with plain system
// calls.
func readSmall(path string, buf []byte) ([]byte, error) {
	if path == "" {
		return nil, unix.ENOENT
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// parseUint parses a decimal number followed by white space.
func parseUint(b []byte) (uint64, bool) {
	var v uint64
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			break
		}
		v = v*10 + uint64(c-'0')
		n++
	}
	return v, n > 0 && n < 20
}
