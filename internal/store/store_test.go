package store

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func rec(id string, keys ...string) *Record {
	a := Allocation{Spec: "gpu", Amount: len(keys), Created: time.Unix(0, 0).UTC()}
	for _, k := range keys {
		a.Devices = append(a.Devices, Device{Key: k, Nodes: []string{"/dev/" + k}, NUMA: -1})
	}
	return &Record{ID: id, Type: "gpu", Allocations: []Allocation{a}}
}

func TestPutGetDelete(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := Path(dir, "drm")
	s := open(t, path)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state dir: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("db file: %v %v", fi.Mode(), err)
	}
	err := s.Update(func(tx *Tx) error {
		if err := tx.Put(rec("a", "k1", "k2")); err != nil {
			return err
		}
		return tx.Put(rec("b", "k3"))
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.View(func(tx *Tx) error {
		r, err := tx.Get("a")
		if err != nil || r == nil || len(r.Devices()) != 2 {
			return fmt.Errorf("get a: %+v %v", r, err)
		}
		if tx.Holder("k3") != "b" || tx.Holder("k9") != "" {
			return errors.New("holder index wrong")
		}
		if held := maps.Collect(tx.Held()); !maps.Equal(held, map[string]string{"k1": "a", "k2": "a", "k3": "b"}) {
			return fmt.Errorf("held %v", held)
		}
		if p := tx.Check(); len(p) != 0 {
			return fmt.Errorf("check: %v", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A device held by another id is refused and the transaction rolls back.
	err = s.Update(func(tx *Tx) error {
		if err := tx.Put(rec("c", "k4")); err != nil {
			return err
		}
		return tx.Put(rec("d", "k1"))
	})
	if err == nil {
		t.Fatal("double booking accepted")
	}
	err = s.Update(func(tx *Tx) error {
		if tx.Holder("k4") != "" {
			return errors.New("rolled-back write is visible")
		}
		r, err := tx.Delete("a")
		if err != nil || r == nil {
			return fmt.Errorf("delete: %v %v", r, err)
		}
		if tx.Holder("k1") != "" || tx.Holder("k3") != "b" {
			return errors.New("index not freed")
		}
		r, err = tx.Delete("a")
		if r != nil || err != nil {
			return fmt.Errorf("second delete: %v %v", r, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLockTimeoutIsBusy(t *testing.T) {
	path := Path(t.TempDir(), "x")
	open(t, path)
	_, err := Open(path, Options{Timeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("err = %v, want ErrBusy", err)
	}
}

// Read-only and Existing opens of a missing store are ErrNotExist and
// make neither the file nor its directory.
func TestOpenMissing(t *testing.T) {
	for _, opt := range []Options{{ReadOnly: true}, {Existing: true}} {
		dir := filepath.Join(t.TempDir(), "state")
		for _, path := range []string{Path(dir, "x"), Path(t.TempDir(), "x")} {
			_, err := Open(path, opt)
			if !errors.Is(err, ErrNotExist) {
				t.Fatalf("%+v: err = %v, want ErrNotExist", opt, err)
			}
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%+v: %s was made", opt, path)
			}
		}
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%+v: %s was made", opt, dir)
		}
	}
}

// An Existing open of a store that is there writes to it.
func TestOpenExisting(t *testing.T) {
	path := Path(t.TempDir(), "x")
	open(t, path).Close()
	s, err := Open(path, Options{Existing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(func(tx *Tx) error { return tx.Put(rec("a", "k")) }); err != nil {
		t.Fatal(err)
	}
	if err := s.View(func(tx *Tx) error {
		if h := tx.Holder("k"); h != "a" {
			return fmt.Errorf("holder of k = %q, want a", h)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Damaged files are reported as corrupt, never panic, and are left as they
// were.
func TestCorruptFiles(t *testing.T) {
	good := Path(t.TempDir(), "good")
	s := open(t, good)
	if err := s.Update(func(tx *Tx) error {
		for i := range 200 {
			if err := tx.Put(rec(fmt.Sprintf("id%d", i), fmt.Sprintf("k%d", i))); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	full, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, 64<<10)
	for i := range garbage {
		garbage[i] = byte(i * 7)
	}
	zeroedMeta := append([]byte(nil), full...)
	clear(zeroedMeta[:8192])
	smashedData := append([]byte(nil), full...)
	for i := 16384; i < len(smashedData); i++ {
		smashedData[i] = 0xff
	}
	cases := map[string][]byte{
		"garbage":      garbage,
		"text":         []byte("not a database\n"),
		"truncated":    full[:len(full)/2],
		"tiny":         full[:100],
		"zeroed meta":  zeroedMeta,
		"smashed data": smashedData,
	}
	// Every case is damage that a read of every record must meet, so each
	// one must be reported as ErrCorrupt, by a writer and by a reader alike.
	for name, content := range cases {
		for _, readOnly := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/readOnly=%v", name, readOnly), func(t *testing.T) {
				path := Path(t.TempDir(), "c")
				if err := os.WriteFile(path, content, 0o600); err != nil {
					t.Fatal(err)
				}
				s, err := Open(path, Options{Timeout: time.Second, ReadOnly: readOnly})
				if err == nil {
					read := func(tx *Tx) error { return tx.ForEach(func(*Record) error { return nil }) }
					if readOnly {
						err = s.View(read)
					} else {
						err = s.Update(read)
					}
					s.Close()
				}
				if !errors.Is(err, ErrCorrupt) {
					t.Errorf("err = %v, want ErrCorrupt", err)
				}
				after, _ := os.ReadFile(path)
				if string(after) != string(content) {
					t.Errorf("corrupt file was modified")
				}
			})
		}
	}
}

func TestNotARegularFile(t *testing.T) {
	path := Path(t.TempDir(), "d")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v", err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	path := Path(t.TempDir(), "s")
	s := open(t, path)
	if err := s.Update(func(tx *Tx) error {
		return tx.tx.Bucket(bucketMeta).Put(keySchema, []byte("99"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.View(func(*Tx) error { return nil }); err == nil {
		t.Fatal("newer schema accepted")
	}
}

func BenchmarkAddDel(b *testing.B) {
	s, err := Open(Path(b.TempDir(), "bench"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		if err := s.Update(func(tx *Tx) error { return tx.Put(rec("a", "k1")) }); err != nil {
			b.Fatal(err)
		}
		if err := s.Update(func(tx *Tx) error { _, err := tx.Delete("a"); return err }); err != nil {
			b.Fatal(err)
		}
	}
}

// A store gets a random identity when it is created; it stays across opens
// and read-only views, and two stores never share one.
func TestID(t *testing.T) {
	dir := t.TempDir()
	id := func(path string, opt Options) string {
		s, err := Open(path, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var id string
		if err := s.View(func(tx *Tx) error { id = tx.ID(); return nil }); err != nil {
			t.Fatal(err)
		}
		return id
	}
	a := id(Path(dir, "a"), Options{})
	if len(a) != 32 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Fatalf("identity %q is not 128 bits of lower-case hex", a)
	}
	if again := id(Path(dir, "a"), Options{ReadOnly: true}); again != a {
		t.Fatalf("identity changed across opens: %q then %q", a, again)
	}
	if b := id(Path(dir, "b"), Options{}); b == a {
		t.Fatalf("two stores share the identity %q", a)
	}
	// A store written before identities existed gets one on its next write.
	s := open(t, Path(dir, "old"))
	if err := s.db.Update(func(btx *bolt.Tx) error { return btx.Bucket(bucketMeta).Delete(keyID) }); err != nil {
		t.Fatal(err)
	}
	var before, after string
	_ = s.View(func(tx *Tx) error { before = tx.ID(); return nil })
	if err := s.Update(func(tx *Tx) error { after = tx.ID(); return nil }); err != nil || before != "" || len(after) != 32 {
		t.Fatalf("old store: identity %q before its first write, %q in it (%v)", before, after, err)
	}
}
