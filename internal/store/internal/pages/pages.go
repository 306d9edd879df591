// Package pages checks the page graph of a bbolt file (file format
// version 2, in the machine's byte order) before bbolt follows it:
// Precheck what bbolt.Open reads, Check the rest.
package pages

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
)

// bbolt trusts the pages it reads. A damaged page that points at itself, at
// a page past the end of the file or into the middle of another page can
// make it loop forever, overflow its stack (fatal in Go, not a panic) or
// fault outside the main goroutine. The page graph of a store file is
// therefore walked here, under the file lock and before bbolt follows a
// page: the meta page bbolt will use, every page reachable from its root,
// and the freelist.
//
// bbolt.Open follows no page: it validates the two meta pages (magic,
// version, checksum) and, for writing, reads the freelist page the meta
// page names, in the calling goroutine, where Open's guard turns a fault
// or a panic into ErrCorrupt. Precheck, in the OpenFile hook, checks
// those reads first: a valid meta page, and a freelist page within the
// file whose entries fit it (else bbolt would allocate as many ids as a
// damaged count says). The walk then runs on bbolt's own mapping, right
// after bbolt.Open and before the first transaction (Check): one
// pass over the file's live pages, which the transaction's full read of
// the store touches anyway. A meta page that records no freelist (bbolt's
// NoFreelistSync, which this package never writes) is refused as
// corrupt: bbolt.Open would walk every page of such a file itself, in a
// goroutine of its own, before any check of ours could run.
//
// The layout is bbolt's (go.etcd.io/bbolt, file format version 2), in the
// machine's byte order.

const (
	pageHeaderSize = 16
	elementSize    = 16 // branch and leaf page elements
	metaMagic      = 0xED0CDAED
	metaVersion    = 2
	noFreelist     = ^uint64(0)
	branchFlag     = 0x01
	leafFlag       = 0x02
	freelistFlag   = 0x10
	bucketFlag     = 0x01 // a leaf element that is a bucket
	inBucketSize   = 16   // root page id and sequence
	maxReadAll     = 16 << 20
)

var native = binary.NativeEndian

// meta is the part of a meta page the check needs.
type meta struct {
	pageSize             uint64
	root, freelist, high uint64
	txid                 uint64
}

// parseMeta decodes the meta page at the start of p and reports whether it
// is valid by bbolt's rules: magic, version and checksum.
func parseMeta(p []byte) (meta, bool) {
	if len(p) < pageHeaderSize+64 {
		return meta{}, false
	}
	m := p[pageHeaderSize:]
	h := fnv.New64a()
	h.Write(m[:56])
	if native.Uint32(m) != metaMagic || native.Uint32(m[4:]) != metaVersion || h.Sum64() != native.Uint64(m[56:]) {
		return meta{}, false
	}
	return meta{pageSize: uint64(native.Uint32(m[8:])), root: native.Uint64(m[16:]),
		freelist: native.Uint64(m[32:]), high: native.Uint64(m[40:]), txid: native.Uint64(m[48:])}, true
}

// pageFile reads a store file by pages.
type pageFile struct {
	f    *os.File
	size uint64
	all  []byte // the whole file, when it is small
}

func (pf *pageFile) read(off, n uint64) ([]byte, error) {
	if off > pf.size || n > pf.size-off {
		return nil, fmt.Errorf("%d bytes at offset %d lie past the end of the file (%d bytes)", n, off, pf.size)
	}
	if pf.all != nil {
		return pf.all[off : off+n], nil
	}
	b := make([]byte, n)
	if _, err := pf.f.ReadAt(b, int64(off)); err != nil {
		return nil, err
	}
	return b, nil
}

// Precheck checks, with plain reads, what bbolt.Open reads of the file f,
// size bytes: the meta page it will use and the header of the freelist
// page. A file that records no freelist is refused. The walk of the page
// graph is left to Check.
func Precheck(f *os.File, size int64) error {
	pf := &pageFile{f: f, size: uint64(size)}
	m, err := pf.meta()
	switch {
	case err != nil:
		return err
	case m.freelist == noFreelist:
		return errors.New("the meta page records no freelist (bbolt's NoFreelistSync, which this store never writes)")
	}
	return pf.freelistFits(m)
}

// freelistFits checks the header of m's freelist page: it lies within the
// file, is the freelist, and its entries fit its pages.
func (pf *pageFile) freelistFits(m meta) error {
	if m.high < 2 || m.high > pf.size/m.pageSize {
		return fmt.Errorf("the meta page claims %d pages, the file holds %d", m.high, pf.size/m.pageSize)
	}
	if m.freelist < 2 || m.freelist >= m.high {
		return fmt.Errorf("freelist page id %d is outside 2..%d", m.freelist, m.high-1)
	}
	hdr, err := pf.read(m.freelist*m.pageSize, pageHeaderSize+8)
	if err != nil {
		return err
	}
	if native.Uint64(hdr) != m.freelist {
		return fmt.Errorf("page %d says it is page %d", m.freelist, native.Uint64(hdr))
	}
	overflow := uint64(native.Uint32(hdr[12:]))
	if overflow >= m.high-m.freelist {
		return fmt.Errorf("page %d overflows past the last page", m.freelist)
	}
	_, _, err = freelistCount(m.freelist, hdr, (overflow+1)*m.pageSize)
	return err
}

// freelistCount reads the entry count of freelist page id from its first
// bytes p (at least the header and 8 bytes) and checks that the entries
// fit the page's n bytes. It returns the count and the offset of the
// first entry.
func freelistCount(id uint64, p []byte, n uint64) (count, at uint64, err error) {
	if native.Uint16(p[8:]) != freelistFlag {
		return 0, 0, fmt.Errorf("page %d is not the freelist", id)
	}
	count, at = uint64(native.Uint16(p[10:])), uint64(pageHeaderSize)
	if count == 0xFFFF {
		count, at = native.Uint64(p[pageHeaderSize:]), at+8
	}
	if count > (n-at)/8 {
		return 0, 0, fmt.Errorf("the freelist's %d entries do not fit its page", count)
	}
	return count, at, nil
}

// Check walks the page graph of the meta page bbolt will use in data, the
// whole file as bbolt maps it.
func Check(data []byte) error {
	pf := &pageFile{size: uint64(len(data)), all: data}
	m, err := pf.meta()
	if err != nil {
		return err
	}
	return pf.walk(m)
}

// meta returns the meta page bbolt will use: the valid one with the higher
// transaction id. The page size comes from the first valid meta page, the
// second one found as bbolt finds it.
func (pf *pageFile) meta() (meta, error) {
	first, _ := pf.read(0, pageHeaderSize+64)
	m0, ok0 := parseMeta(first)
	ps := m0.pageSize
	if !ok0 {
		for i := range 15 {
			off := uint64(1024) << i
			if off+1024 >= pf.size {
				break
			}
			if p, err := pf.read(off, pageHeaderSize+64); err == nil {
				if m, ok := parseMeta(p); ok {
					ps = m.pageSize
					break
				}
			}
		}
	}
	if ps < 1024 || ps > 1<<24 || ps&(ps-1) != 0 {
		return meta{}, errors.New("neither meta page is valid")
	}
	second, _ := pf.read(ps, pageHeaderSize+64)
	m1, ok1 := parseMeta(second)
	m0.pageSize, m1.pageSize = ps, ps
	switch {
	case ok0 && (!ok1 || m0.txid >= m1.txid):
		return m0, nil
	case ok1:
		return m1, nil
	}
	return meta{}, errors.New("neither meta page is valid")
}

// walker visits every page reachable from a meta page once.
type walker struct {
	pf   *pageFile
	m    meta
	seen bits // pages in use
}

// bits is a set of page ids, one bit each.
type bits []uint64

func newBits(n uint64) bits      { return make(bits, (n+63)/64) }
func (b bits) has(i uint64) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bits) set(i uint64)      { b[i/64] |= 1 << (i % 64) }

func (pf *pageFile) walk(m meta) error {
	if m.high < 2 || m.high > pf.size/m.pageSize {
		return fmt.Errorf("the meta page claims %d pages, the file holds %d", m.high, pf.size/m.pageSize)
	}
	w := &walker{pf: pf, m: m, seen: newBits(m.high)}
	w.seen.set(0)
	w.seen.set(1)
	if err := w.page(m.root, 0, keyRange{}); err != nil {
		return err
	}
	return w.freelist()
}

// keyRange bounds the keys of a subtree: lo ≤ key < hi, nil unbounded.
// bbolt finds where to read and write a key by comparing it with branch
// keys, so a branch key out of its range would send a later write to the
// wrong leaf.
type keyRange struct{ lo, hi []byte }

func (r keyRange) holds(k []byte) bool {
	return (r.lo == nil || bytes.Compare(k, r.lo) >= 0) && (r.hi == nil || bytes.Compare(k, r.hi) < 0)
}

// page checks page id and, through it, every page below it: keys in
// ascending order within r. depth bounds the recursion on top of the
// cycle check.
func (w *walker) page(id uint64, depth int, r keyRange) error {
	if id < 2 || id >= w.m.high {
		return fmt.Errorf("page id %d is outside 2..%d", id, w.m.high-1)
	}
	if w.seen.has(id) || depth > 64 {
		return fmt.Errorf("page %d is reached twice", id)
	}
	p, err := w.span(id)
	if err != nil {
		return err
	}
	n, err := elements(id, p, r)
	if err != nil {
		return err
	}
	switch native.Uint16(p[8:]) {
	case branchFlag:
		if n == 0 {
			return fmt.Errorf("branch page %d has no elements", id)
		}
		for i := range n {
			el := elementAt(p, i)
			sub := keyRange{el.key, r.hi}
			if i+1 < n {
				sub.hi = elementAt(p, i+1).key
			}
			if err := w.page(native.Uint64(el.e[8:]), depth+1, sub); err != nil {
				return err
			}
		}
		return nil
	case leafFlag:
		for i := range n {
			if el := elementAt(p, i); native.Uint32(el.e)&bucketFlag != 0 {
				if err := w.bucket(id, el.value, depth); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return fmt.Errorf("page %d has type %#x where a branch or leaf page belongs", id, native.Uint16(p[8:]))
}

// span returns the bytes of page id with its overflow pages, and marks
// them seen.
func (w *walker) span(id uint64) ([]byte, error) {
	hdr, err := w.pf.read(id*w.m.pageSize, pageHeaderSize)
	if err != nil {
		return nil, err
	}
	overflow := uint64(native.Uint32(hdr[12:]))
	if native.Uint64(hdr) != id {
		return nil, fmt.Errorf("page %d says it is page %d", id, native.Uint64(hdr))
	}
	if overflow >= w.m.high-id {
		return nil, fmt.Errorf("page %d overflows past the last page", id)
	}
	for i := id; i <= id+overflow; i++ {
		if w.seen.has(i) {
			return nil, fmt.Errorf("page %d is reached twice", i)
		}
		w.seen.set(i)
	}
	return w.pf.read(id*w.m.pageSize, (overflow+1)*w.m.pageSize)
}

// element is one element of a branch or leaf page: the element itself,
// its key, and on a leaf page its value.
type element struct{ e, key, value []byte }

// elements checks the elements of page p (id for messages): that they,
// their keys and their values lie within the page and that the keys
// ascend within r. It returns their number; elementAt then reads them.
func elements(id uint64, p []byte, r keyRange) (uint64, error) {
	count := uint64(native.Uint16(p[10:]))
	if pageHeaderSize+count*elementSize > uint64(len(p)) {
		return 0, fmt.Errorf("page %d: %d elements do not fit", id, count)
	}
	leaf := native.Uint16(p[8:]) == leafFlag
	var prev []byte
	for i := range count {
		at := pageHeaderSize + i*elementSize
		start, ksize, vsize := elementSpan(p[at:at+elementSize], at, leaf)
		if start > uint64(len(p)) || ksize+vsize > uint64(len(p))-start {
			return 0, fmt.Errorf("page %d: element %d points past the page", id, i)
		}
		key := p[start : start+ksize]
		if !r.holds(key) || i > 0 && bytes.Compare(prev, key) >= 0 {
			return 0, fmt.Errorf("page %d: key %d is out of order", id, i)
		}
		prev = key
	}
	return count, nil
}

// elementSpan decodes element e, at offset at of its page: where its key
// starts, the key's size and the value's. A branch element is pos, ksize,
// page id; a leaf element flags, pos, ksize, vsize. pos counts from the
// element.
func elementSpan(e []byte, at uint64, leaf bool) (start, ksize, vsize uint64) {
	if leaf {
		return at + uint64(native.Uint32(e[4:])), uint64(native.Uint32(e[8:])), uint64(native.Uint32(e[12:]))
	}
	return at + uint64(native.Uint32(e)), uint64(native.Uint32(e[4:])), 0
}

// elementAt returns element i of page p, which elements has checked.
func elementAt(p []byte, i uint64) element {
	at := pageHeaderSize + i*elementSize
	e := p[at : at+elementSize]
	start, ksize, vsize := elementSpan(e, at, native.Uint16(p[8:]) == leafFlag)
	return element{e, p[start : start+ksize], p[start+ksize : start+ksize+vsize]}
}

// bucket checks the bucket whose value v a leaf of page id holds: an
// inline page within the value, or a tree of its own.
func (w *walker) bucket(id uint64, v []byte, depth int) error {
	if len(v) < inBucketSize {
		return fmt.Errorf("page %d: a bucket value is too short", id)
	}
	if root := native.Uint64(v); root != 0 {
		return w.page(root, depth+1, keyRange{})
	}
	inline := v[inBucketSize:]
	if len(inline) < pageHeaderSize || native.Uint16(inline[8:]) != leafFlag {
		return fmt.Errorf("page %d: an inline bucket is not a leaf page", id)
	}
	n, err := elements(id, inline, keyRange{})
	if err != nil {
		return err
	}
	for i := range n {
		if native.Uint32(elementAt(inline, i).e)&bucketFlag != 0 {
			return fmt.Errorf("page %d: an inline bucket holds a bucket", id)
		}
	}
	return nil
}

// freelist checks the freelist page: every page it lists lies within the
// file, is listed once, and is not in use. bbolt hands out listed pages to
// the next write, which would overwrite live data.
func (w *walker) freelist() error {
	id := w.m.freelist
	if id < 2 || id >= w.m.high {
		return fmt.Errorf("freelist page id %d is outside 2..%d", id, w.m.high-1)
	}
	if w.seen.has(id) {
		return fmt.Errorf("the freelist page %d is in use", id)
	}
	p, err := w.span(id)
	if err != nil {
		return err
	}
	count, at, err := freelistCount(id, p, uint64(len(p)))
	if err != nil {
		return err
	}
	listed := newBits(w.m.high)
	for i := range count {
		free := native.Uint64(p[at+8*i:])
		switch {
		case free < 2 || free >= w.m.high:
			return fmt.Errorf("the freelist lists page %d, outside 2..%d", free, w.m.high-1)
		case w.seen.has(free):
			return fmt.Errorf("the freelist lists page %d, which is in use", free)
		case listed.has(free):
			return fmt.Errorf("the freelist lists page %d twice", free)
		}
		listed.set(free)
	}
	return nil
}
