// Package store keeps a plugin's allocations in one bbolt file: request-id →
// record of the devices held per resource-spec, and an index device-key →
// request-id so that "is this device free" is one lookup.
//
// Every change happens in one read-write transaction, so an allocation is
// either fully recorded or not at all. The file lock that bbolt takes makes
// concurrent plugin processes queue up; the wait is bounded.
package store

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Schema is the version of the on-disk layout this package writes.
const Schema = 1

var (
	bucketMeta     = []byte("meta")
	bucketRequests = []byte("requests")
	bucketDevices  = []byte("devices")
	keySchema      = []byte("schema")
	keyID          = []byte("id")
)

// Errors callers act on. They are wrapped with the path and cause.
var (
	// ErrBusy means another invocation held the lock for the whole wait.
	ErrBusy = errors.New("allocation store is locked by another invocation")
	// ErrCorrupt means the file cannot be read as a store. It is never
	// overwritten; an operator has to look at it.
	ErrCorrupt = errors.New("allocation store is corrupt")
	// ErrNotExist means a read-only open found no file.
	ErrNotExist = errors.New("allocation store does not exist")
)

// Device is one device held by a request.
type Device struct {
	Key   string   `json:"key"`   // stable identity, for example a PCI address
	Nodes []string `json:"nodes"` // host device node paths handed out
	NUMA  int      `json:"numa"`  // NUMA node, -1 when unknown
}

// Allocation is what one resource-spec of a request holds.
type Allocation struct {
	Spec    string    `json:"spec"`
	Amount  int       `json:"amount"`
	Devices []Device  `json:"devices"`
	Created time.Time `json:"created"`
	// Nodes, when set, is the node list handed out for the whole
	// allocation, for plugins whose nodes do not belong to single devices
	// (a delegate's answer, a shared /dev/vfio/vfio).
	Nodes []string `json:"nodes,omitempty"`
	// Delegate names the plugin chain-loaded for this allocation.
	Delegate string `json:"delegate,omitempty"`
}

// HandedOut returns the node paths the allocation handed out.
func (a *Allocation) HandedOut() []string {
	if a.Nodes != nil {
		return a.Nodes
	}
	var out []string
	for _, d := range a.Devices {
		out = append(out, d.Nodes...)
	}
	return out
}

// Record is everything one request-id holds in one plugin.
type Record struct {
	ID          string       `json:"id"`
	Type        string       `json:"type"`
	Allocations []Allocation `json:"allocations"`
}

// Find returns the allocation for spec, or nil.
func (r *Record) Find(spec string) *Allocation {
	for i := range r.Allocations {
		if r.Allocations[i].Spec == spec {
			return &r.Allocations[i]
		}
	}
	return nil
}

// Devices returns every device of the record, allocation by allocation.
func (r *Record) Devices() []Device {
	var ds []Device
	for _, a := range r.Allocations {
		ds = append(ds, a.Devices...)
	}
	return ds
}

// Options tune Open.
type Options struct {
	// Timeout bounds the wait for the file lock. Zero means 10 seconds.
	Timeout time.Duration
	// ReadOnly opens with a shared lock and never creates the file.
	ReadOnly bool
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

// Open opens or creates the store at path, creating its directory 0700 and
// the file 0600.
func Open(path string, opt Options) (s *Store, err error) {
	if opt.Timeout <= 0 {
		opt.Timeout = 10 * time.Second
	}
	if opt.ReadOnly {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", path, ErrNotExist)
		}
	} else if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	fi, statErr := os.Stat(path)
	switch {
	case statErr == nil && !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file: %w", path, ErrCorrupt)
	case errors.Is(statErr, os.ErrNotExist) && !opt.ReadOnly:
		if err := create(path); err != nil {
			return nil, err
		}
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer guard(path, &err)
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      opt.Timeout,
		ReadOnly:     opt.ReadOnly,
		FreelistType: bolt.FreelistMapType,
	})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%s: %w (waited %v for its lock)", path, ErrBusy, opt.Timeout)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch):
		return nil, fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
	case err != nil && isFormatError(err):
		return nil, fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
	case err != nil:
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	return &Store{db: db, path: path}, nil
}

// create makes a new, initialised store file at path atomically: it is
// built under a temporary name and linked into place, so a crash or a full
// disk never leaves a half-initialised file that later opens would have to
// call corrupt. If another process created the file first, its file wins.
func create(path string) error {
	tmp := fmt.Sprintf("%s.new-%d", path, os.Getpid())
	_ = os.Remove(tmp)
	defer os.Remove(tmp)
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: time.Second, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	err = db.Update(func(btx *bolt.Tx) error { return (&Tx{tx: btx, path: path}).init() })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	return nil
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
// returns nil.
func (s *Store) Update(fn func(*Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer guard(s.path, &err)
	return s.db.Update(func(btx *bolt.Tx) error {
		tx := &Tx{tx: btx, path: s.path}
		if err := tx.init(); err != nil {
			return err
		}
		return fn(tx)
	})
}

// View runs fn in a read-only transaction.
func (s *Store) View(fn func(*Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer guard(s.path, &err)
	return s.db.View(func(btx *bolt.Tx) error {
		tx := &Tx{tx: btx, path: s.path}
		if err := tx.checkSchema(); err != nil {
			return err
		}
		return fn(tx)
	})
}

// Tx is a transaction on the store.
type Tx struct {
	tx   *bolt.Tx
	path string
}

// init creates the buckets on first use and checks the schema version.
func (t *Tx) init() error {
	if t.tx.Bucket(bucketMeta) == nil {
		meta, err := t.tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := meta.Put(keySchema, []byte(strconv.Itoa(Schema))); err != nil {
			return err
		}
		for _, b := range [][]byte{bucketRequests, bucketDevices} {
			if _, err := t.tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
	} else if err := t.checkSchema(); err != nil {
		return err
	}
	return t.ensureID()
}

// ensureID gives the store its identity on its first write: random, so
// that stores sharing a CDI spec directory can tell their files apart.
func (t *Tx) ensureID() error {
	meta := t.tx.Bucket(bucketMeta)
	if meta.Get(keyID) != nil {
		return nil
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	return meta.Put(keyID, []byte(hex.EncodeToString(b[:])))
}

// ID returns the store's identity, lower-case hex; "" in a read-only
// transaction of a store no write has touched yet.
func (t *Tx) ID() string {
	if meta := t.tx.Bucket(bucketMeta); meta != nil {
		return string(meta.Get(keyID))
	}
	return ""
}

func (t *Tx) checkSchema() error {
	meta := t.tx.Bucket(bucketMeta)
	if meta == nil {
		return nil // a fresh store: nothing recorded yet
	}
	v, err := strconv.Atoi(string(meta.Get(keySchema)))
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w: schema version %q", t.path, ErrCorrupt, meta.Get(keySchema))
	case v > Schema:
		return fmt.Errorf("%s: written by a newer version (schema %d, this binary knows %d)", t.path, v, Schema)
	}
	if t.tx.Bucket(bucketRequests) == nil || t.tx.Bucket(bucketDevices) == nil {
		return fmt.Errorf("%s: %w: missing buckets", t.path, ErrCorrupt)
	}
	return nil
}

// Get returns the record of id, or nil when id holds nothing.
func (t *Tx) Get(id string) (*Record, error) {
	b := t.tx.Bucket(bucketRequests)
	if b == nil {
		return nil, nil
	}
	v := b.Get([]byte(id))
	if v == nil {
		return nil, nil
	}
	return t.decode(id, v)
}

func (t *Tx) decode(id string, v []byte) (*Record, error) {
	var r Record
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("%s: %w: record %q: %v", t.path, ErrCorrupt, id, err)
	}
	return &r, nil
}

// Holder returns the request-id holding the device key, or "".
func (t *Tx) Holder(key string) string {
	b := t.tx.Bucket(bucketDevices)
	if b == nil {
		return ""
	}
	return string(b.Get([]byte(key)))
}

// Put writes the record and indexes its devices. A device already held by
// another request-id is refused, so the store can never double-book.
func (t *Tx) Put(r *Record) error {
	req, dev := t.tx.Bucket(bucketRequests), t.tx.Bucket(bucketDevices)
	for _, d := range r.Devices() {
		if h := string(dev.Get([]byte(d.Key))); h != "" && h != r.ID {
			return fmt.Errorf("device %s is already held by request %q", d.Key, h)
		}
		if err := dev.Put([]byte(d.Key), []byte(r.ID)); err != nil {
			return err
		}
	}
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return req.Put([]byte(r.ID), v)
}

// Delete removes the record of id and frees its devices. It returns the
// removed record, or nil when id held nothing.
func (t *Tx) Delete(id string) (*Record, error) {
	r, err := t.Get(id)
	if r == nil || err != nil {
		return nil, err
	}
	dev := t.tx.Bucket(bucketDevices)
	for _, d := range r.Devices() {
		if string(dev.Get([]byte(d.Key))) == id {
			if err := dev.Delete([]byte(d.Key)); err != nil {
				return nil, err
			}
		}
	}
	return r, t.tx.Bucket(bucketRequests).Delete([]byte(id))
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
	b := t.tx.Bucket(bucketRequests)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		r, err := t.decode(string(k), v)
		if err != nil {
			return err
		}
		return fn(r)
	})
}

// Check verifies the index against the records: every recorded device is
// indexed to its request-id and every index entry points at a record that
// holds the device. It returns the problems found.
func (t *Tx) Check() []string {
	var problems []string
	held := map[string]string{}
	err := t.ForEach(func(r *Record) error {
		for _, d := range r.Devices() {
			if prev, ok := held[d.Key]; ok {
				problems = append(problems, fmt.Sprintf("device %s recorded under %q and %q", d.Key, prev, r.ID))
			}
			held[d.Key] = r.ID
			if h := t.Holder(d.Key); h != r.ID {
				problems = append(problems, fmt.Sprintf("device %s of %q indexed to %q", d.Key, r.ID, h))
			}
		}
		return nil
	})
	if err != nil {
		return append(problems, err.Error())
	}
	if b := t.tx.Bucket(bucketDevices); b != nil {
		_ = b.ForEach(func(k, v []byte) error {
			if held[string(k)] != string(v) {
				problems = append(problems, fmt.Sprintf("index entry %s → %q has no record", k, v))
			}
			return nil
		})
	}
	return problems
}
