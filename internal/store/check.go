package store

import (
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Report is what Verify found in a store.
type Report struct {
	Path     string   `json:"path"`
	Schema   int      `json:"schema"`
	Records  int      `json:"records"`  // records read
	Devices  int      `json:"devices"`  // index entries read
	Problems []string `json:"problems"` // empty when the store is sound
	// Repairable says that every record is intact and no device is
	// recorded twice, so the index can be rebuilt from the records
	// without losing or inventing an allocation.
	Repairable bool `json:"repairable"`
	// Repaired says that CheckFile rebuilt the index; Problems are then
	// those found before.
	Repaired bool `json:"repaired"`
}

// CheckFile verifies the store at path offline: opened read-only with a
// shared lock, waiting at most timeout, and never written. A file too
// damaged to open is reported as a problem, not as an error. With repair,
// and only when the report says Repairable, the index is rebuilt
// (RepairIndex) under the exclusive lock. Errors are for stores that
// could not be looked at: missing, locked, refused or unreadable.
func CheckFile(path string, timeout time.Duration, repair bool) (Report, error) {
	rep := Report{Path: path, Problems: []string{}}
	s, err := Open(path, Options{ReadOnly: true, Timeout: timeout})
	if errors.Is(err, ErrCorrupt) {
		rep.Problems = append(rep.Problems, err.Error())
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	rep, err = s.Verify()
	s.Close()
	if err != nil && errors.Is(err, ErrCorrupt) {
		rep.Problems = append(rep.Problems, err.Error())
		return rep, nil
	}
	if err != nil || !repair || len(rep.Problems) == 0 || !rep.Repairable {
		return rep, err
	}
	if s, err = Open(path, Options{Timeout: timeout}); err != nil {
		return rep, err
	}
	defer s.Close()
	if rep, err = s.RepairIndex(); err != nil {
		return rep, err
	}
	rep.Repaired = true
	return rep, nil
}

// ErrNotRepairable means RepairIndex found damage it must not repair.
var ErrNotRepairable = errors.New("the records themselves are damaged; the index cannot be rebuilt from them safely")

// Verify reads the whole store and reports every problem instead of
// stopping at the first: entries that fail their checksum or are out of
// order, buckets that do not add up to their digest, records that do not
// decode, the index disagreeing with the records, and devices recorded
// under two request-ids. bbolt's own page check runs too. It never writes.
func (s *Store) Verify() (rep Report, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer guard(s.path, &err)
	err = s.db.View(func(btx *bolt.Tx) error {
		var err error
		rep, _, err = s.inspect(btx)
		if err != nil || len(rep.Problems) > 0 {
			return err
		}
		// Only once every page our reads touched was sound: bbolt's check
		// runs in a goroutine of its own, where a fault cannot be
		// recovered.
		for e := range btx.Check() {
			rep.Problems = append(rep.Problems, "bbolt: "+e.Error())
		}
		return nil
	})
	return rep, err
}

// inspect loads the store in a transaction and checks it, collecting
// every problem.
func (s *Store) inspect(btx *bolt.Tx) (Report, *view, error) {
	rep := Report{Path: s.path, Problems: []string{}}
	recordsOK := true
	report := func(tag byte, p string) {
		rep.Problems = append(rep.Problems, p)
		recordsOK = recordsOK && tag == tagDevices
	}
	v, err := load(btx, report)
	if err != nil {
		return rep, nil, fmt.Errorf("%s: %w", s.path, err)
	}
	rep.Schema, rep.Records, rep.Devices = v.schema, len(v.recs), len(v.devs)
	(&Tx{tx: btx, path: s.path, v: v}).check(report)
	rep.Repairable = recordsOK
	return rep, v, nil
}

// RepairIndex rebuilds the device index from the records, in one write
// transaction, when Verify's problems are confined to the index. It
// refuses (ErrNotRepairable) when any record is damaged, missing or
// doubly booked, because an index built from incomplete records would free
// devices that are still in use. It returns the report from before the
// repair.
func (s *Store) RepairIndex() (rep Report, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer guard(s.path, &err)
	err = s.db.Update(func(btx *bolt.Tx) error {
		var v *view
		var err error
		rep, v, err = s.inspect(btx)
		switch {
		case err != nil:
			return err
		case len(rep.Problems) == 0:
			return nil
		case !rep.Repairable:
			return fmt.Errorf("%s: %w", s.path, ErrNotRepairable)
		}
		if v.schema < Schema {
			if err := migrate(btx, v); err != nil {
				return err
			}
		}
		return rebuildIndex(btx, v)
	})
	return rep, err
}

// rebuildIndex replaces the devices bucket with one built from the
// records of v, and writes the digest.
func rebuildIndex(btx *bolt.Tx, v *view) error {
	if err := btx.DeleteBucket(bucketDevices); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
		return err
	}
	if _, err := btx.CreateBucket(bucketDevices); err != nil {
		return err
	}
	tx := &Tx{tx: btx, v: v, dirty: true}
	v.devs, v.tally[1] = map[string]string{}, tally{}
	for _, id := range slices.Sorted(maps.Keys(v.recs)) {
		r, err := decode(id, v.recs[id])
		if err != nil {
			return err
		}
		for _, d := range r.Devices() {
			if err := tx.put(tagDevices, d.Key, []byte(id)); err != nil {
				return err
			}
		}
	}
	return tx.flush()
}
