package store

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// The layout of schema 2 (docs/protocol.md#store):
//
//	meta/schema     "2"
//	meta/digest     per bucket (requests, devices): entry count and the sum
//	                of the entries' checksums, 8 bytes each, big-endian;
//	                then the checksum of those 32 bytes
//	requests/<id>   checksum (8 bytes) ‖ the record as JSON
//	devices/<key>   checksum (8 bytes) ‖ the request-id
//
// An entry's checksum is CRC-64/ECMA over the bucket's tag, the key's length
// as a uvarint, the key and the payload, so a value moved under another key
// or into the other bucket fails it too. The digest lets a reader that has
// read every entry tell that none is missing or extra, which bbolt cannot:
// a damaged leaf or branch page can drop entries without any error. Schema
// 1 had bare values and no digest; a write transaction upgrades it.

const (
	tagRequests = 'r'
	tagDevices  = 'd'
	sumSize     = 8
)

var (
	bucketMeta     = []byte("meta")
	bucketRequests = []byte("requests")
	bucketDevices  = []byte("devices")
	keySchema      = []byte("schema")
	keyDigest      = []byte("digest")
	keyID          = []byte("id")
)

// crcECMA is the reflected polynomial of CRC-64/ECMA-182, as hash/crc64's
// ECMA constant names it.
const crcECMA = 0xC96C5795D7870F42

// crcTable is the textbook byte-at-a-time table of CRC-64/ECMA: 256
// entries, 2 KiB, built once when the process starts, in microseconds.
// hash/crc64 gives the same values, but its first use builds 32 KiB of
// slicing tables, which cost ADD and DEL 37-79 µs and 16 page faults
// (docs/performance.md#checksums). TestChecksumFormat pins the values.
var crcTable = func() (t [256]uint64) {
	for i := range t {
		c := uint64(i)
		for range 8 {
			c = c>>1 ^ crcECMA&-(c&1)
		}
		t[i] = c
	}
	return t
}()

// crcUpdate continues the CRC-64/ECMA crc over p, as crc64.Update with
// the ECMA table does.
func crcUpdate(crc uint64, p []byte) uint64 {
	crc = ^crc
	for _, b := range p {
		crc = crcTable[byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// checksum is the checksum of one entry.
func checksum(tag byte, key, payload []byte) uint64 {
	var hdr [1 + binary.MaxVarintLen64]byte
	hdr[0] = tag
	n := binary.PutUvarint(hdr[1:], uint64(len(key)))
	h := crcUpdate(0, hdr[:1+n])
	h = crcUpdate(h, key)
	return crcUpdate(h, payload)
}

// seal prefixes payload with its checksum.
func seal(tag byte, key, payload []byte) []byte {
	v := make([]byte, sumSize+len(payload))
	binary.BigEndian.PutUint64(v, checksum(tag, key, payload))
	copy(v[sumSize:], payload)
	return v
}

// unseal checks a sealed value and returns its payload and checksum.
func unseal(tag byte, key, v []byte) ([]byte, uint64, bool) {
	if len(v) < sumSize {
		return nil, 0, false
	}
	sum, payload := binary.BigEndian.Uint64(v), v[sumSize:]
	return payload, sum, sum == checksum(tag, key, payload)
}

// tally is the count and checksum sum of one bucket's entries. Sums are
// added, not combined with XOR, so that an entry read twice does not
// cancel out.
type tally struct{ n, sum uint64 }

func (t *tally) add(sum uint64)    { t.n++; t.sum += sum }
func (t *tally) remove(sum uint64) { t.n--; t.sum -= sum }

// digest is the tally of the requests and the devices bucket.
type digest [2]tally

func (d digest) encode() []byte {
	b := make([]byte, 0, 40)
	for _, t := range d {
		b = binary.BigEndian.AppendUint64(b, t.n)
		b = binary.BigEndian.AppendUint64(b, t.sum)
	}
	return binary.BigEndian.AppendUint64(b, crcUpdate(0, b))
}

func decodeDigest(b []byte) (digest, bool) {
	var d digest
	if len(b) != 40 || binary.BigEndian.Uint64(b[32:]) != crcUpdate(0, b[:32]) {
		return d, false
	}
	for i := range d {
		d[i] = tally{binary.BigEndian.Uint64(b[16*i:]), binary.BigEndian.Uint64(b[16*i+8:])}
	}
	return d, true
}

// view is the verified content of a store, read in full at the start of
// every transaction. Lookups are answered from it, never by searching
// bbolt's tree: a damaged branch key could make a search miss an entry
// that is there.
type view struct {
	schema int
	recs   map[string][]byte // request-id → record JSON
	devs   map[string]string // device key → request-id
	tally  digest            // of what was read, kept up to date by writes
}

// errNewer marks a store written by a newer schema.
var errNewer = errors.New("written by a newer version")

// reporter receives each problem found, with the tag of the bucket whose
// entries it concerns, or 0 when it concerns the store as a whole.
type reporter func(tag byte, problem string)

// load reads every entry of the store and verifies it. Each problem found
// goes to report; a nil error with problems reported means the view is
// not to be trusted.
func load(tx *bolt.Tx, report reporter) (*view, error) {
	v := &view{recs: map[string][]byte{}, devs: map[string]string{}}
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		report(0, "the meta bucket is missing")
		return v, nil
	}
	raw := meta.Get(keySchema)
	s, err := strconv.Atoi(string(raw))
	switch {
	case err != nil || s < 1:
		report(0, fmt.Sprintf("schema version %q is not a version", raw))
		return v, nil
	case s > Schema:
		return nil, fmt.Errorf("%w (schema %d, this binary knows %d)", errNewer, s, Schema)
	}
	v.schema = s
	if s == 1 && meta.Get(keyDigest) != nil {
		report(0, "the schema version says 1, but the store has a digest, which only schema 2 has: the version is damaged")
		return v, nil
	}
	req, dev := tx.Bucket(bucketRequests), tx.Bucket(bucketDevices)
	if req == nil || dev == nil {
		report(0, "the requests or devices bucket is missing")
		return v, nil
	}
	want, ok := decodeDigest(meta.Get(keyDigest))
	if ok {
		// Sized for what the digest says the buckets hold, so that the
		// maps are not grown (and rehashed) entry by entry.
		v.recs = make(map[string][]byte, sizeHint(want[0].n))
		v.devs = make(map[string]string, sizeHint(want[1].n))
	}
	loadBucket(req, tagRequests, s, &v.tally[0], report, func(k string, p []byte) { v.recs[k] = p })
	loadBucket(dev, tagDevices, s, &v.tally[1], report, func(k string, p []byte) { v.devs[k] = string(p) })
	if s == 1 {
		return v, nil // no digest before schema 2
	}
	if !ok {
		report(0, "the digest is missing or fails its checksum")
		return v, nil
	}
	for i, tag := range []byte{tagRequests, tagDevices} {
		if got := v.tally[i]; got != want[i] {
			report(tag, fmt.Sprintf("the %s bucket holds %d entries that do not add up to its digest (%d recorded): entries are missing, extra or damaged", bucketName(tag), got.n, want[i].n))
		}
	}
	return v, nil
}

// sizeHint is the size to reserve for n entries counted by a digest,
// bounded so that a forged digest cannot make a process reserve much.
func sizeHint(n uint64) int { return int(min(n, 1<<16)) }

// loadBucket reads one bucket in key order, checking the order and each
// entry's checksum (schema 2), and passes each good entry to put.
func loadBucket(b *bolt.Bucket, tag byte, schema int, t *tally, report reporter, put func(string, []byte)) {
	var prev []byte
	c := b.Cursor()
	for k, val := c.First(); k != nil; k, val = c.Next() {
		if prev != nil && bytes.Compare(k, prev) <= 0 {
			report(tag, fmt.Sprintf("%s bucket: key %q out of order after %q", bucketName(tag), k, prev))
		}
		prev = k
		if val == nil {
			report(tag, fmt.Sprintf("%s bucket: %q is a bucket, not an entry", bucketName(tag), k))
			continue
		}
		payload := val
		if schema >= 2 {
			p, sum, ok := unseal(tag, k, val)
			if !ok {
				report(tag, fmt.Sprintf("%s bucket: entry %q fails its checksum", bucketName(tag), k))
				continue
			}
			payload = p
			t.add(sum)
		}
		put(string(k), payload)
	}
}

func bucketName(tag byte) string {
	if tag == tagRequests {
		return "requests"
	}
	return "devices"
}

// initialise lays out an empty store of the current schema.
func initialise(tx *bolt.Tx) error {
	meta, err := tx.CreateBucket(bucketMeta)
	if err != nil {
		return err
	}
	for _, b := range [][]byte{bucketRequests, bucketDevices} {
		if _, err := tx.CreateBucket(b); err != nil {
			return err
		}
	}
	if err := meta.Put(keySchema, []byte(strconv.Itoa(Schema))); err != nil {
		return err
	}
	if err := meta.Put(keyDigest, digest{}.encode()); err != nil {
		return err
	}
	return ensureID(tx)
}

// ensureID gives the store its identity, random, unless it has one: stores
// that share a CDI spec directory tell their files apart by it.
func ensureID(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta.Get(keyID) != nil {
		return nil
	}
	b, err := random16()
	if err != nil {
		return err
	}
	return meta.Put(keyID, []byte(hex.EncodeToString(b[:])))
}

// random16 reads 16 bytes from the kernel's random source with
// getrandom(2). crypto/rand would do the same, but linking it runs the
// initialisation of its FIPS 140 module (hashes, AES, a DRBG) at the start
// of every plugin process, for 16 bytes once per store.
func random16() ([16]byte, error) {
	var b [16]byte
	for n := 0; n < len(b); {
		m, err := unix.Getrandom(b[n:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return b, fmt.Errorf("getrandom: %w", err)
		}
		n += m
	}
	return b, nil
}

// migrate upgrades a schema 1 store, whose view was just loaded, to the
// current schema inside the caller's write transaction: every entry is
// sealed with its checksum and the digest is written. A record that is not
// valid JSON stops the upgrade; the transaction is then not committed.
func migrate(tx *bolt.Tx, v *view) error {
	req, dev := tx.Bucket(bucketRequests), tx.Bucket(bucketDevices)
	v.tally = digest{}
	recs := make(map[string][]byte, len(v.recs))
	for id, p := range v.recs {
		if _, err := decode(id, p); err != nil {
			return err
		}
		sealed := seal(tagRequests, []byte(id), p)
		if err := req.Put([]byte(id), sealed); err != nil {
			return err
		}
		recs[id] = sealed[sumSize:]
		v.tally[0].add(binary.BigEndian.Uint64(sealed))
	}
	v.recs = recs
	for key, id := range v.devs {
		sealed := seal(tagDevices, []byte(key), []byte(id))
		if err := dev.Put([]byte(key), sealed); err != nil {
			return err
		}
		v.tally[1].add(binary.BigEndian.Uint64(sealed))
	}
	meta := tx.Bucket(bucketMeta)
	if err := meta.Put(keySchema, []byte(strconv.Itoa(Schema))); err != nil {
		return err
	}
	v.schema = Schema
	return meta.Put(keyDigest, v.tally.encode())
}
