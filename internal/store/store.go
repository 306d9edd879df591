// Package store keeps a plugin's allocations in one bbolt file: request-id →
// record of the devices held per resource-spec, and an index device-key →
// request-id so that "is this device free" is one lookup.
//
// Every change happens in one read-write transaction, so an allocation is
// either fully recorded or not at all. The file lock that bbolt takes makes
// concurrent plugin processes queue up; the wait is bounded.
package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/cdi-exec/plugins/internal/atomicfile"
	"github.com/cdi-exec/plugins/internal/store/internal/record"
)

// Schema is the version of the on-disk layout this package writes.
const Schema = 2

// Errors callers act on. They are wrapped with the path and cause.
var (
	// ErrBusy means another invocation held the lock for the whole wait.
	ErrBusy = errors.New("allocation store is locked by another invocation")
	// ErrCorrupt means the file cannot be read as a store, or what it
	// holds fails its checksums. It is never overwritten; an operator has
	// to look at it.
	ErrCorrupt = errors.New("allocation store is corrupt")
	// ErrUnsafe means the store or its directory is a symbolic link, is
	// owned by another user, or may be written by others. Nothing is
	// read or written there.
	ErrUnsafe = errors.New("allocation store location is unsafe")
	// ErrNotExist means a read-only open found no file.
	ErrNotExist = errors.New("allocation store does not exist")
)

// The record types are internal/record's: a record's form is its codec's
// concern, and the store's callers use them as the store's own.
type (
	// Device is one device held by a request.
	Device = record.Device
	// Allocation is what one resource-spec of a request holds.
	Allocation = record.Allocation
	// Record is everything one request-id holds in one plugin.
	Record = record.Record
)

// Options tune Open.
type Options struct {
	// Timeout bounds the wait for the file lock. Zero means 10 seconds.
	Timeout time.Duration
	// ReadOnly opens with a shared lock and never creates the file.
	ReadOnly bool
	// Existing opens for writing a store that is already there: neither
	// the file nor its directory is created, and a missing one is
	// ErrNotExist. DEL and GC, which have nothing to free without a
	// store, open this way.
	Existing bool
}

// Store is an open allocation store.
type Store struct {
	db   *bolt.DB
	path string
}

// Path returns the conventional file of a plugin's store in stateDir.
func Path(stateDir, plugin string) string {
	return filepath.Join(stateDir, plugin+".db")
}

// Open opens the store at path, an absolute path, creating its directory
// 0700 and the file 0600 unless opt.ReadOnly or opt.Existing. Neither may
// be a symbolic link, belong to another user or be writable by others
// (ErrUnsafe). An empty file is damage (ErrCorrupt), never initialised. A
// write open also removes stale temporary files that killed processes left
// beside the store. The file's page graph is checked before the store is
// returned (checkMapped); a file that records no freelist is refused.
func Open(path string, opt Options) (s *Store, err error) {
	if opt.Timeout <= 0 {
		opt.Timeout = 10 * time.Second
	}
	d, err := openDir(path, !opt.ReadOnly && !opt.Existing)
	if err != nil {
		return nil, err
	}
	defer d.close()
	base := filepath.Base(path)
	_, exists, err := d.stat(base)
	switch {
	case err != nil:
		return nil, err
	case !exists && (opt.ReadOnly || opt.Existing):
		return nil, fmt.Errorf("%s: %w", path, ErrNotExist)
	case !opt.ReadOnly:
		atomicfile.SweepAt(d.fd, d.path, tempPattern(base))
		if !exists {
			if err := d.create(base); err != nil {
				return nil, fmt.Errorf("creating %s: %w", path, err)
			}
		}
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer guard(path, &err)
	o := &opener{dir: d, base: base, timeout: opt.Timeout}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      opt.Timeout,
		ReadOnly:     opt.ReadOnly,
		FreelistType: bolt.FreelistMapType,
		OpenFile:     o.open,
	})
	if err != nil {
		return nil, openError(path, opt, err)
	}
	if err := checkMapped(db, o.size); err != nil {
		db.Close()
		return nil, err
	}
	return &Store{db: db, path: path}, nil
}

// openError maps bbolt's open errors to this package's.
func openError(path string, opt Options, err error) error {
	switch {
	case errors.Is(err, ErrUnsafe), errors.Is(err, ErrCorrupt), errors.Is(err, ErrNotExist), errors.Is(err, ErrBusy):
		return err
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("%s: %w (waited %v for its lock)", path, ErrBusy, opt.Timeout)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch), isFormatError(err):
		return fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
	}
	return fmt.Errorf("opening %s: %w", path, err)
}

// Probe checks, without opening or locking it, what Open would check
// first: the directory and the file are safe, and the file, if there is
// one, is not empty. It reports whether the file exists. It is cheap
// enough for INFO, which does not otherwise read the store: it looks at
// the directory and the file with one lstat each, as nothing is read
// from them after.
func Probe(path string) (bool, error) {
	if err := absolute(path); err != nil {
		return false, err
	}
	name := filepath.Dir(path)
	euid := uint32(os.Geteuid())
	var st unix.Stat_t
	switch err := unix.Lstat(name, &st); {
	case err == unix.ENOENT:
		return false, nil
	case err == unix.ELOOP || err == unix.ENOTDIR:
		return false, notDir(name)
	case err != nil:
		return false, &os.PathError{Op: "lstat", Path: name, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		return false, linkedDir(name)
	default:
		return false, notDir(name)
	}
	if err := checkOwner(name, &st, "0700", euid); err != nil {
		return false, err
	}
	file := filepath.Join(name, filepath.Base(path))
	switch err := unix.Lstat(file, &st); {
	case err == unix.ENOENT:
		return false, nil
	case err != nil:
		return false, &os.PathError{Op: "stat", Path: file, Err: err}
	}
	return true, checkFile(file, &st, euid)
}

// create makes a new, initialised store file atomically: it is built in a
// temporary file of its own and linked into place, so a crash or a full disk
// never leaves a half-initialised file that later opens would have to call
// corrupt. The link never replaces anything: if another process linked its
// store first, that one is used.
func (d *dir) create(base string) error {
	return atomicfile.Write(d.path, base, atomicfile.Options{Temp: tempPattern(base), Perm: 0o600, NoClobber: true}, func(f *os.File) error {
		db, err := bolt.Open(f.Name(), 0o600, &bolt.Options{
			Timeout:      time.Second,
			FreelistType: bolt.FreelistMapType,
			OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
				fd, err := unix.Open(name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm))
				if err != nil {
					return nil, &os.PathError{Op: "open", Path: name, Err: err}
				}
				return os.NewFile(uintptr(fd), name), nil // no poller, as in opener.open
			},
		})
		if err != nil {
			return err
		}
		err = db.Update(initialise)
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		return err
	})
}

// isFormatError reports errors bbolt returns for files that are not a
// database but are not I/O or permission failures either.
func isFormatError(err error) bool {
	var pe *os.PathError
	var errno syscall.Errno
	return !errors.As(err, &pe) && !errors.As(err, &errno)
}

// guard turns a panic or memory fault while reading the mapped file into
// ErrCorrupt. bbolt trusts the pages it reads; a damaged or truncated file can
// make it panic or touch memory past the end of the file.
func guard(path string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: %w: %v", path, ErrCorrupt, r)
	}
}

// Close releases the file and its lock.
func (s *Store) Close() error { return s.db.Close() }

// Update runs fn in one read-write transaction, committed only if fn
// returns nil. The store is read and verified in full first; a schema 1
// store is upgraded in the same transaction.
func (s *Store) Update(fn func(*Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer guard(s.path, &err)
	return s.db.Update(func(btx *bolt.Tx) error {
		tx, err := s.begin(btx)
		if err != nil {
			return err
		}
		if tx.v.schema < Schema {
			if err := migrate(btx, tx.v); err != nil {
				return err
			}
		}
		if err := ensureID(btx); err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			return err
		}
		return tx.flush()
	})
}

// View runs fn in a read-only transaction, after the store was read and
// verified in full.
func (s *Store) View(fn func(*Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer guard(s.path, &err)
	return s.db.View(func(btx *bolt.Tx) error {
		tx, err := s.begin(btx)
		if err != nil {
			return err
		}
		return fn(tx)
	})
}

// begin loads and verifies the store for a transaction; the first problem
// found makes it ErrCorrupt.
func (s *Store) begin(btx *bolt.Tx) (*Tx, error) {
	var problems []string
	v, err := load(btx, func(_ byte, p string) { problems = append(problems, p) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	if len(problems) > 0 {
		more := ""
		if len(problems) > 1 {
			more = fmt.Sprintf(" (and %d more problems; cdictl check lists them)", len(problems)-1)
		}
		return nil, fmt.Errorf("%s: %w: %s%s", s.path, ErrCorrupt, problems[0], more)
	}
	return &Tx{tx: btx, path: s.path, v: v}, nil
}

// Tx is a transaction on the store.
type Tx struct {
	tx    *bolt.Tx
	path  string
	v     *view
	dirty bool
}

// Get returns the record of id, or nil when id holds nothing.
func (t *Tx) Get(id string) (*Record, error) {
	p, ok := t.v.recs[id]
	if !ok {
		return nil, nil
	}
	r, err := decode(id, p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.path, err)
	}
	return r, nil
}

// decode parses the record stored under id.
func decode(id string, p []byte) (*Record, error) {
	var r Record
	if err := record.Unmarshal(p, &r); err != nil {
		return nil, fmt.Errorf("%w: record %q: %v", ErrCorrupt, id, err)
	}
	if r.ID != id {
		return nil, fmt.Errorf("%w: record %q is stored under %q", ErrCorrupt, r.ID, id)
	}
	return &r, nil
}

// ID returns the store's identity, lower-case hex; "" in a read-only
// transaction of a store that no write of this version has touched yet.
func (t *Tx) ID() string { return string(t.tx.Bucket(bucketMeta).Get(keyID)) }

// Holder returns the request-id holding the device key, or "".
func (t *Tx) Holder(key string) string { return t.v.devs[key] }

// Held returns every device key that a request-id holds, with its
// holder, from the index: for a caller that cannot name the keys it asks
// about (the shares of a unit of unlimited shares, which are as many as
// are held). The order is unspecified; the transaction must not write
// while it runs.
func (t *Tx) Held() iter.Seq2[string, string] { return maps.All(t.v.devs) }

// Put writes the record and indexes its devices. A device already held by
// another request-id is refused, so the store can never double-book.
func (t *Tx) Put(r *Record) error {
	for _, d := range r.Devices() {
		if h := t.v.devs[d.Key]; h != "" && h != r.ID {
			return fmt.Errorf("device %s is already held by request %q", d.Key, h)
		}
		if err := t.put(tagDevices, d.Key, []byte(r.ID)); err != nil {
			return err
		}
	}
	v, err := record.Marshal(r)
	if err != nil {
		return err
	}
	return t.put(tagRequests, r.ID, v)
}

// put writes one sealed entry and keeps the view and its tally current.
func (t *Tx) put(tag byte, key string, payload []byte) error {
	i, b := t.bucket(tag)
	if old, ok := t.old(tag, key); ok {
		t.v.tally[i].remove(checksum(tag, []byte(key), old))
	}
	v := seal(tag, []byte(key), payload)
	if err := b.Put([]byte(key), v); err != nil {
		return err
	}
	t.v.tally[i].add(binary.BigEndian.Uint64(v))
	if tag == tagRequests {
		t.v.recs[key] = payload
	} else {
		t.v.devs[key] = string(payload)
	}
	t.dirty = true
	return nil
}

// del removes one entry, if present.
func (t *Tx) del(tag byte, key string) error {
	i, b := t.bucket(tag)
	old, ok := t.old(tag, key)
	if !ok {
		return nil
	}
	if err := b.Delete([]byte(key)); err != nil {
		return err
	}
	t.v.tally[i].remove(checksum(tag, []byte(key), old))
	if tag == tagRequests {
		delete(t.v.recs, key)
	} else {
		delete(t.v.devs, key)
	}
	t.dirty = true
	return nil
}

func (t *Tx) bucket(tag byte) (int, *bolt.Bucket) {
	if tag == tagRequests {
		return 0, t.tx.Bucket(bucketRequests)
	}
	return 1, t.tx.Bucket(bucketDevices)
}

func (t *Tx) old(tag byte, key string) ([]byte, bool) {
	if tag == tagRequests {
		p, ok := t.v.recs[key]
		return p, ok
	}
	id, ok := t.v.devs[key]
	return []byte(id), ok
}

// flush writes the digest of a changed store.
func (t *Tx) flush() error {
	if !t.dirty {
		return nil
	}
	return t.tx.Bucket(bucketMeta).Put(keyDigest, t.v.tally.encode())
}

// Delete removes the record of id and frees its devices. It returns the
// removed record, or nil when id held nothing.
func (t *Tx) Delete(id string) (*Record, error) {
	r, err := t.Get(id)
	if r == nil || err != nil {
		return nil, err
	}
	for _, d := range r.Devices() {
		if t.v.devs[d.Key] == id {
			if err := t.del(tagDevices, d.Key); err != nil {
				return nil, err
			}
		}
	}
	return r, t.del(tagRequests, id)
}

// Replace rewrites the record of r.ID as r, freeing devices it no longer
// holds; a record without allocations is deleted.
func (t *Tx) Replace(r *Record) error {
	if _, err := t.Delete(r.ID); err != nil {
		return err
	}
	if len(r.Allocations) == 0 {
		return nil
	}
	return t.Put(r)
}

// ForEach calls fn for every record, in request-id order.
func (t *Tx) ForEach(fn func(*Record) error) error {
	for _, id := range slices.Sorted(maps.Keys(t.v.recs)) {
		r, err := t.Get(id)
		if err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// Check verifies the index against the records: every recorded device is
// indexed to its request-id, every index entry points at a record that
// holds the device, and no device is recorded under two request-ids. It
// returns the problems found.
func (t *Tx) Check() []string {
	var problems []string
	t.check(func(_ byte, p string) { problems = append(problems, p) })
	return problems
}

// check reports Check's problems: those of the index alone with
// tagDevices, those of the records with tagRequests.
func (t *Tx) check(report reporter) {
	held := map[string]string{}
	for _, id := range slices.Sorted(maps.Keys(t.v.recs)) {
		r, err := t.Get(id)
		if err != nil {
			report(tagRequests, err.Error())
			continue
		}
		for _, d := range r.Devices() {
			if prev, ok := held[d.Key]; ok && prev != id {
				report(tagRequests, fmt.Sprintf("device %s recorded under %q and %q", d.Key, prev, id))
			}
			held[d.Key] = id
			if h := t.v.devs[d.Key]; h != id {
				report(tagDevices, fmt.Sprintf("device %s of %q indexed to %q", d.Key, id, h))
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(t.v.devs)) {
		if v := t.v.devs[k]; held[k] != v {
			report(tagDevices, fmt.Sprintf("index entry %s → %q has no record", k, v))
		}
	}
}
