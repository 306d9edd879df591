// Package cache keeps a plugin's derived discovery facts between
// invocations, in one file beside its store (<plugin>.cache in the state
// directory), and decides whether they still describe the host.
//
// The facts are opaque bytes to this package; the plugin encodes them and
// filters them per config. A file is only ever replaced whole (written
// under a temporary name and renamed), carries a checksum, and is rebuilt
// when it is missing, stale or corrupt. It is never the store, and never
// the only basis for handing a device out: a plugin checks the devices it
// chose live before it commits (docs/performance.md#discovery-cache).
//
// Staleness is judged from what the kernel changes when devices come and
// go (Stamp): the boot, the uevent sequence number, the modification time
// of devtmpfs directories, and, when those moved, the names and inode
// numbers of the directories that list the devices.
package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/internal/atomicfile"
)

// Watch says where a host shows its devices. Paths are host paths (under
// the host root).
type Watch struct {
	// Boot is the kernel's boot id (proc/sys/kernel/random/boot_id). A
	// host without one is never cached: across a reboot nothing else
	// can be trusted.
	Boot string
	// Seqnum is the kernel's uevent sequence number
	// (sys/kernel/uevent_seqnum); a host without one always takes the
	// listing check.
	Seqnum string
	// Sys are sysfs directories whose entries (names and inode numbers)
	// are compared when the sequence number moved.
	Sys []string
	// Dev are devtmpfs directories whose modification time is compared
	// every time, and whose entries are compared when it moved.
	Dev []string
	// List lists a directory as dirent.List does (the default). A
	// plugin passes its sysfs.Host's List, so that the stamp of a scan
	// and the scan itself read each directory once, and the same.
	List func(dir string, fn func(name []byte, ino uint64, typ uint8)) error
}

// Cache is one plugin's cache file.
type Cache struct {
	dir   string // state directory
	name  string // file name, <plugin>.cache
	key   string // what the facts depend on besides the host's state
	watch Watch
}

// New returns the cache of plugin in stateDir. key names everything the
// facts depend on that the Watch does not cover (the format of the facts,
// the host root): a file with another key is stale.
func New(stateDir, plugin, key string, w Watch) *Cache {
	return &Cache{dir: stateDir, name: plugin + ".cache", key: key, watch: w}
}

// Path is the cache file.
func (c *Cache) Path() string { return c.dir + "/" + c.name }

// Load returns the cached facts when they still describe the host. When
// they do not (or there are none), it returns nil facts and the stamp to
// save freshly scanned facts with: it was taken now, before the caller
// scans, so that a change during the scan is seen by the next Load. A
// stamp of a host that cannot be cached is nil.
//
// When the facts are still valid but the stamp moved (the sequence number
// changed for devices the watch does not list), the file is rewritten
// with the new stamp, so that the next Load is quick again.
func (c *Cache) Load() ([]byte, *Stamp) {
	now, ok := c.quick()
	if !ok {
		return nil, nil
	}
	f, st := c.check(now)
	if f == nil {
		return nil, st
	}
	return f.facts, nil
}

// Summary is Load for the summary saved with the facts. While the quick
// part of the stamp holds, it reads only the head of the file, whose own
// checksum covers the summary: its cost does not grow with the facts.
func (c *Cache) Summary() ([]byte, *Stamp) {
	now, ok := c.quick()
	if !ok {
		return nil, nil
	}
	fd, size, err := c.open()
	if err != nil {
		return nil, c.listed(now)
	}
	defer unix.Close(fd)
	f, err := c.readHead(fd, size)
	if err == nil && now.same(f.st) {
		return f.summary, nil
	}
	if err != nil || now.boot != f.st.boot { // the whole file would not do either
		return nil, c.listed(now)
	}
	f, st := c.judge(now, fd, size) // the listing check, which may rewrite the file
	if f == nil {
		return nil, st
	}
	return f.summary, nil
}

// check reads the whole file and judges it against a quick stamp taken
// now (judge).
func (c *Cache) check(now *Stamp) (*file, *Stamp) {
	fd, size, err := c.open()
	if err != nil {
		return nil, c.listed(now)
	}
	defer unix.Close(fd)
	return c.judge(now, fd, size)
}

// judge reads the whole of the open file fd of size bytes and judges it
// against a quick stamp taken now: the file when it still holds
// (rewritten under the new stamp when only the listings proved it), else
// nil and the stamp to save with.
func (c *Cache) judge(now *Stamp, fd int, size int64) (*file, *Stamp) {
	f, err := c.readWhole(fd, size)
	if err != nil {
		return nil, c.listed(now)
	}
	if now.same(f.st) {
		return f, nil
	}
	if now.boot != f.st.boot {
		return nil, c.listed(now)
	}
	// The sequence number or a /dev directory moved: compare listings.
	now = c.listed(now)
	if now == nil || !now.sameLists(f.st) {
		return nil, now
	}
	_ = c.Save(now, f.summary, f.facts)
	return f, nil
}

// Begin returns a stamp taken now, to save facts scanned after it with;
// nil when the host cannot be cached.
func (c *Cache) Begin() *Stamp {
	now, ok := c.quick()
	if !ok {
		return nil
	}
	return c.listed(now)
}

// open opens the cache file, a regular file of ours, never through a
// link, and returns it and its size.
func (c *Cache) open() (int, int64, error) {
	fd, err := unix.Open(c.Path(), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != uint32(os.Geteuid()) || st.Mode&0o077 != 0 || st.Size > maxSize {
		unix.Close(fd)
		return -1, 0, errors.New("not a cache file of ours")
	}
	return fd, st.Size, nil
}

// readWhole reads and decodes the whole of the open file fd.
func (c *Cache) readWhole(fd int, size int64) (*file, error) {
	buf := make([]byte, size)
	n, err := readAt(fd, buf, 0)
	if err != nil {
		return nil, err
	}
	return c.decode(buf[:n])
}

// readHead reads and decodes only the head of the open file fd.
func (c *Cache) readHead(fd int, size int64) (*file, error) {
	var small [headRead]byte // on the stack: no heap span to fault in
	n, err := readAt(fd, small[:min(int(size), headRead)], 0)
	if err != nil {
		return nil, err
	}
	b := small[:n]
	if end, ok := headEnd(b); ok && end > n && end <= int(size) { // a long key: read the rest of the head
		b = append(make([]byte, 0, end), b...)[:end]
		if m, err := readAt(fd, b[n:], int64(n)); err != nil || m != end-n {
			return nil, errors.New("truncated cache file")
		}
	}
	return c.decodeHead(b, int(size))
}

// maxSize bounds a cache file; facts of thousands of devices take tens of
// KiB.
const maxSize = 16 << 20

// headRead is how much of the file a read of its head asks for at first:
// the head of a cache whose key names a host root of ordinary length.
const headRead = 512

// readAt reads into b from offset off until b is full or the file ends.
func readAt(fd int, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Pread(fd, b[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

// Save replaces the cache file with facts and their summary under stamp
// st: the new file is written whole under a temporary name and renamed
// into place. The summary is what the plugin derives from the facts for
// its cheapest command; it is kept in the file's head (Summary). A nil
// stamp (a host that cannot be cached) or a state directory that does not
// exist saves nothing. The file is not synced: after a crash it is at
// worst empty or torn, which its checksums catch, and it is rebuilt.
func (c *Cache) Save(st *Stamp, summary, facts []byte) error {
	if st == nil {
		return nil
	}
	// Not synced; the old file is unlinked before the rename, so a reader
	// meanwhile finds the old file, none (and rescans), or the new one.
	return atomicfile.WriteBytes(c.dir, c.name, atomicfile.Options{Temp: c.name + ".tmp-*", Perm: 0o600, NoSync: true, UnlinkFirst: true},
		c.encode(st, summary, facts))
}

// The file is a head and a body. The head: the magic, a checksum of the
// rest of the head, its length (4 bytes), then the format version, key,
// stamp, summary, and the body's length and checksum. The body: the facts.
// A read of the head alone (Summary) checks everything it returns, and
// that the file is as long as the head says; a read of the whole file
// checks the body too.
const (
	magic   = "CDIcache"
	version = 2
	fixed   = len(magic) + 8 + 4 // magic, checksum, length of the head
)

func (c *Cache) encode(st *Stamp, summary, facts []byte) []byte {
	b := make([]byte, fixed, 160+len(c.key)+len(summary)+len(facts))
	copy(b, magic)
	b = binary.AppendUvarint(b, version)
	b = appendString(b, c.key)
	b = st.append(b)
	b = appendString(b, string(summary))
	b = binary.AppendUvarint(b, uint64(len(facts)))
	b = binary.LittleEndian.AppendUint64(b, sum(facts))
	binary.LittleEndian.PutUint32(b[fixed-4:], uint32(len(b)-fixed))
	binary.LittleEndian.PutUint64(b[len(magic):], sum(b[fixed-4:]))
	return append(b, facts...)
}

// file is a cache file, decoded.
type file struct {
	st      *Stamp
	summary []byte
	facts   []byte // nil when only the head was read
}

// headEnd returns where the head that b begins ends, from its length
// field; false when b is too short to say or is not a cache file.
func headEnd(b []byte) (int, bool) {
	if len(b) < fixed || string(b[:len(magic)]) != magic {
		return 0, false
	}
	n := binary.LittleEndian.Uint32(b[fixed-4:])
	if n > maxSize {
		return 0, false
	}
	return fixed + int(n), true
}

// decode checks a whole file and splits it into stamp, summary and facts.
func (c *Cache) decode(b []byte) (*file, error) {
	st, h, err := c.head(b)
	if err != nil {
		return nil, err
	}
	body := b[h.end:]
	if uint64(len(body)) != h.bodyLen || sum(body) != h.bodySum {
		return nil, errors.New("checksum mismatch")
	}
	return &file{st: st, summary: h.summary, facts: body}, nil
}

// decodeHead checks the head of a file of size bytes, which b holds
// (and perhaps some of the body), and returns its stamp and summary. The
// summary is copied out of b.
func (c *Cache) decodeHead(b []byte, size int) (*file, error) {
	st, h, err := c.head(b)
	if err != nil {
		return nil, err
	}
	if uint64(size-h.end) != h.bodyLen {
		return nil, errors.New("truncated cache file")
	}
	return &file{st: st, summary: []byte(string(h.summary))}, nil
}

// head is the head of a file, decoded, but for its stamp.
type head struct {
	summary          []byte // in place
	end              int    // where the body begins
	bodyLen, bodySum uint64
}

// head checks and decodes the head that b begins with. The stamp is
// returned apart, as it holds nothing of b.
func (c *Cache) head(b []byte) (*Stamp, head, error) {
	end, ok := headEnd(b)
	if !ok || end > len(b) {
		return nil, head{}, errors.New("not a cache file")
	}
	want := binary.LittleEndian.Uint64(b[len(magic):])
	if sum(b[fixed-4:end]) != want {
		return nil, head{}, errors.New("checksum mismatch")
	}
	r := reader{b: b[fixed:end]}
	if r.uvarint() != version || string(r.bytes()) != c.key {
		return nil, head{}, errors.New("another format or host")
	}
	st := r.stamp()
	h := head{summary: r.bytes(), end: end}
	h.bodyLen, h.bodySum = r.uvarint(), r.u64()
	if r.err != nil || len(r.b) != 0 {
		return nil, head{}, errors.New("malformed cache file")
	}
	return st, h, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader decodes the file; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) u64() uint64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) string() string { return string(r.bytes()) }

// bytes reads a string in place.
func (r *reader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errors.New("truncated cache file")
	}
	r.b = nil
}

// String describes the cache for messages.
func (c *Cache) String() string { return fmt.Sprintf("discovery cache %s", c.Path()) }

// sum is a 64-bit checksum that catches a torn or garbled file: eight
// bytes at a time, multiply and rotate, no tables (hash/crc32 builds its
// tables at start-up, which costs a fresh process more than it saves).
func sum(b []byte) uint64 {
	const p1, p2 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F
	h := uint64(len(b)) * p1
	for ; len(b) >= 8; b = b[8:] {
		h = bits.RotateLeft64(h^binary.LittleEndian.Uint64(b)*p2, 31) * p1
	}
	for _, c := range b {
		h = bits.RotateLeft64(h^uint64(c)*p2, 11) * p1
	}
	h ^= h >> 29
	h *= p2
	return h ^ h>>32
}

// trimID reads a one-line kernel attribute such as boot_id.
func trimID(b []byte) string { return strings.TrimSpace(string(bytes.TrimRight(b, "\x00"))) }

// racy is how close to the present a directory's modification time must
// be for it not to prove that nothing changed since: file system times
// come from a coarse clock, so a change in the same tick as the stamp
// could leave the time as it was.
const racy = time.Second
