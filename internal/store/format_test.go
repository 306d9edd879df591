package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// raw runs fn on the store file with bbolt alone, bypassing this package:
// the way damage or an older binary changes a file.
func raw(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// state is the logical content of a store: records and index.
type state struct {
	Recs map[string]*Record
	Devs map[string]string
}

func readState(s *Store) (state, error) {
	st := state{Recs: map[string]*Record{}, Devs: map[string]string{}}
	err := s.View(func(tx *Tx) error {
		for k, v := range tx.v.devs {
			st.Devs[k] = v
		}
		return tx.ForEach(func(r *Record) error { st.Recs[r.ID] = r; return nil })
	})
	return st, err
}

func filled(t *testing.T, n int) (string, state) {
	t.Helper()
	path := Path(t.TempDir(), "f")
	s := open(t, path)
	err := s.Update(func(tx *Tx) error {
		for i := range n {
			if err := tx.Put(rec(fmt.Sprintf("id%03d", i), fmt.Sprintf("k%03d", i))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want, err := readState(s)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return path, want
}

// Damage that bbolt reads without complaint: a changed byte inside a
// record, a record or index entry lost, an entry added behind the store's
// back. Every read reports it.
func TestDamageBboltCannotSee(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
		want   string
	}{
		{"byte inside a record", func(t *testing.T, path string) {
			b, _ := os.ReadFile(path)
			i := bytes.Index(b, []byte("/dev/k007"))
			if i < 0 {
				t.Fatal("record not found in the file")
			}
			b[i+len("/dev/k00")] = '8' // still valid JSON: /dev/k008
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "fails its checksum"},
		{"record lost", func(t *testing.T, path string) {
			raw(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketRequests).Delete([]byte("id003")) })
		}, "requests bucket holds 19 entries"},
		{"index entry lost", func(t *testing.T, path string) {
			raw(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketDevices).Delete([]byte("k003")) })
		}, "devices bucket holds 19 entries"},
		{"entry added", func(t *testing.T, path string) {
			raw(t, path, func(tx *bolt.Tx) error {
				return tx.Bucket(bucketDevices).Put([]byte("k999"), seal(tagDevices, []byte("k999"), []byte("id001")))
			})
		}, "devices bucket holds 21 entries"},
		{"entry moved to another key", func(t *testing.T, path string) {
			raw(t, path, func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketDevices)
				v := append([]byte(nil), b.Get([]byte("k001"))...)
				if err := b.Delete([]byte("k001")); err != nil {
					return err
				}
				return b.Put([]byte("k000x"), v)
			})
		}, "fails its checksum"},
		{"digest lost", func(t *testing.T, path string) {
			raw(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keyDigest) })
		}, "digest is missing"},
		{"schema version damaged to 1", func(t *testing.T, path string) {
			raw(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte("1")) })
		}, "the version is damaged"},
		{"meta bucket lost", func(t *testing.T, path string) {
			raw(t, path, func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketMeta) })
		}, "meta bucket is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, _ := filled(t, 20)
			tt.damage(t, path)
			before, _ := os.ReadFile(path)
			for _, ro := range []bool{true, false} {
				s, err := Open(path, Options{ReadOnly: ro, Timeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				_, err = readState(s)
				uerr := s.Update(func(*Tx) error { return nil })
				s.Close()
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("read-only %v: View: %v, want ErrCorrupt saying %q", ro, err, tt.want)
				}
				if !ro && !errors.Is(uerr, ErrCorrupt) {
					t.Fatalf("Update: %v", uerr)
				}
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
				t.Fatal("damaged store was written")
			}
		})
	}
}

// A store of schema 1 (bare values, no digest) keeps working: read as it
// is, and upgraded by the first write transaction, whose own change is
// committed with the upgrade.
func TestMigrationFromSchema1(t *testing.T) {
	path := Path(t.TempDir(), "old")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, _ := tx.CreateBucket(bucketMeta)
		req, _ := tx.CreateBucket(bucketRequests)
		dev, _ := tx.CreateBucket(bucketDevices)
		if err := meta.Put(keySchema, []byte("1")); err != nil {
			return err
		}
		for _, r := range []*Record{rec("a", "k1", "k2"), rec("b", "k3")} {
			v, _ := json.Marshal(r)
			if err := req.Put([]byte(r.ID), v); err != nil {
				return err
			}
			for _, d := range r.Devices() {
				if err := dev.Put([]byte(d.Key), []byte(r.ID)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := state{Recs: map[string]*Record{"a": rec("a", "k1", "k2"), "b": rec("b", "k3")},
		Devs: map[string]string{"k1": "a", "k2": "a", "k3": "b"}}

	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := readState(ro)
	ro.Close()
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("schema 1 read: %v\n%+v", err, got)
	}

	s := open(t, path)
	if err := s.Update(func(tx *Tx) error { return tx.Put(rec("c", "k4")) }); err != nil {
		t.Fatal(err)
	}
	want.Recs["c"], want.Devs["k4"] = rec("c", "k4"), "c"
	if got, err := readState(s); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("after upgrade: %v\n%+v", err, got)
	}
	rep, err := s.Verify()
	if err != nil || len(rep.Problems) != 0 || rep.Schema != Schema {
		t.Fatalf("verify after upgrade: %v %+v", err, rep)
	}
	s.Close()
	// Every entry now carries its checksum.
	raw(t, path, func(tx *bolt.Tx) error {
		if v := string(tx.Bucket(bucketMeta).Get(keySchema)); v != "2" {
			t.Errorf("schema = %q", v)
		}
		return tx.Bucket(bucketRequests).ForEach(func(k, v []byte) error {
			if _, _, ok := unseal(tagRequests, k, v); !ok {
				t.Errorf("record %s not sealed", k)
			}
			return nil
		})
	})
}

// A failed upgrade (a record that is not JSON) commits nothing.
func TestMigrationRefusesBadRecords(t *testing.T) {
	path := Path(t.TempDir(), "old")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Update(func(tx *bolt.Tx) error {
		meta, _ := tx.CreateBucket(bucketMeta)
		req, _ := tx.CreateBucket(bucketRequests)
		_, _ = tx.CreateBucket(bucketDevices)
		_ = meta.Put(keySchema, []byte("1"))
		return req.Put([]byte("a"), []byte("{not json"))
	})
	db.Close()
	before, _ := os.ReadFile(path)
	s := open(t, path)
	if err := s.Update(func(*Tx) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v", err)
	}
	s.Close()
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("a failed upgrade changed the file")
	}
}

// Verify lists every problem; RepairIndex rebuilds a damaged index from
// intact records and refuses when records are damaged.
func TestVerifyAndRepair(t *testing.T) {
	t.Run("sound", func(t *testing.T) {
		path, _ := filled(t, 5)
		s := open(t, path)
		rep, err := s.Verify()
		if err != nil || len(rep.Problems) != 0 || rep.Records != 5 || rep.Devices != 5 {
			t.Fatalf("%v %+v", err, rep)
		}
	})
	t.Run("index damaged", func(t *testing.T) {
		path, want := filled(t, 5)
		raw(t, path, func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketDevices)
			if err := b.Put([]byte("k001"), []byte("garbage")); err != nil {
				return err
			}
			return b.Put([]byte("k002"), seal(tagDevices, []byte("k002"), []byte("id004")))
		})
		s := open(t, path)
		rep, err := s.Verify()
		if err != nil || len(rep.Problems) < 3 || !rep.Repairable {
			t.Fatalf("%v %+v", err, rep)
		}
		if _, err := s.RepairIndex(); err != nil {
			t.Fatal(err)
		}
		if rep, err := s.Verify(); err != nil || len(rep.Problems) != 0 {
			t.Fatalf("after repair: %v %+v", err, rep)
		}
		if got, err := readState(s); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("after repair: %v %+v", err, got)
		}
	})
	t.Run("records damaged", func(t *testing.T) {
		path, _ := filled(t, 5)
		raw(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketRequests).Delete([]byte("id001")) })
		before, _ := os.ReadFile(path)
		s := open(t, path)
		rep, err := s.Verify()
		if err != nil || len(rep.Problems) == 0 || rep.Repairable {
			t.Fatalf("%v %+v", err, rep)
		}
		if _, err := s.RepairIndex(); !errors.Is(err, ErrNotRepairable) {
			t.Fatalf("repair: %v", err)
		}
		s.Close()
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Fatal("a refused repair changed the file")
		}
	})
	t.Run("device recorded twice", func(t *testing.T) {
		path, _ := filled(t, 3)
		raw(t, path, func(tx *bolt.Tx) error {
			v, _ := json.Marshal(rec("id002", "k001"))
			return tx.Bucket(bucketRequests).Put([]byte("id002"), seal(tagRequests, []byte("id002"), v))
		})
		s := open(t, path)
		rep, err := s.Verify()
		if err != nil || rep.Repairable || !strings.Contains(strings.Join(rep.Problems, "\n"), "recorded under") {
			t.Fatalf("%v %+v", err, rep)
		}
	})
}

// The checksums stored in existing files are CRC-64/ECMA as the store has
// always written them: the check value of CRC-64/XZ, and one entry's
// checksum computed by the table-driven code this replaced.
func TestChecksumFormat(t *testing.T) {
	if got, want := crcUpdate(0, []byte("123456789")), uint64(0x995dc9bbdf1939fa); got != want {
		t.Errorf("crcUpdate(123456789) = %#x, want %#x", got, want)
	}
	if got, want := checksum(tagRequests, []byte("req-1"), []byte(`{"gpu":{"amount":1}}`)), uint64(0x1f54299266c099ae); got != want {
		t.Errorf("checksum of a record = %#x, want %#x", got, want)
	}
}
