package pages_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/internal/store/internal/pages"
)

var native = binary.NativeEndian

// history is a store file after a few commits, with a branch page, a
// freelist that lists pages, and two meta pages.
type history struct {
	file     []byte
	pageSize int
	newest   int // index of the meta page of the last commit
}

func rec(id, key string) *store.Record {
	return &store.Record{ID: id, Type: "gpu", Allocations: []store.Allocation{{Spec: "gpu-with-a-longer-resource-spec", Amount: 1,
		Created: time.Unix(0, 0).UTC(), Devices: []store.Device{{Key: key, Nodes: []string{"/dev/" + key}, NUMA: -1}}}}}
}

func buildHistory(t *testing.T) *history {
	t.Helper()
	path := store.Path(t.TempDir(), "c")
	s, err := store.Open(path, store.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	update := func(fn func(tx *store.Tx) error) {
		if err := s.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	for batch := range 6 {
		update(func(tx *store.Tx) error {
			for i := batch * 50; i < (batch+1)*50; i++ {
				if err := tx.Put(rec(fmt.Sprintf("req-%03d", i), fmt.Sprintf("0000:%02x:%02x.0", i/256, i%256))); err != nil {
					return err
				}
			}
			return nil
		})
	}
	update(func(tx *store.Tx) error {
		for i := 0; i < 300; i += 7 {
			if _, err := tx.Delete(fmt.Sprintf("req-%03d", i)); err != nil {
				return err
			}
		}
		return nil
	})
	update(func(tx *store.Tx) error { return tx.Put(rec("last-add", "0000:ff:00.0")) })
	s.Close()
	h := &history{pageSize: os.Getpagesize()}
	if h.file, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	// The meta page with the higher transaction id is the newest; the
	// id sits after the 16-byte page header and 48 bytes of meta.
	if txid := func(p int) uint64 {
		return native.Uint64(h.file[p*h.pageSize+64:])
	}; txid(1) > txid(0) {
		h.newest = 1
	}
	return h
}

// openAndRead opens the store at path for writing, as a plugin does, and
// reads every record.
func openAndRead(path string) (int, error) {
	s, err := store.Open(path, store.Options{Timeout: time.Second})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	n := 0
	err = s.View(func(tx *store.Tx) error {
		return tx.ForEach(func(*store.Record) error { n++; return nil })
	})
	return n, err
}

// The page check refuses page graphs that would make bbolt loop, crash or
// write over live pages, each found by damage aimed at it.
func TestCheckPages(t *testing.T) {
	h := buildHistory(t)
	ps := uint64(h.pageSize)
	page := func(b []byte, id uint64) []byte { return b[id*ps : (id+1)*ps] }
	m, ok := pages.ParseMeta(page(h.file, uint64(h.newest)))
	if !ok {
		t.Fatal("newest meta page invalid")
	}
	branch := uint64(0) // a branch page of the live tree
	live, err := pages.Live(h.file, m)
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(2); id < m.High; id++ {
		if live(id) && native.Uint16(page(h.file, id)[8:]) == pages.BranchFlag && native.Uint16(page(h.file, id)[10:]) > 1 {
			branch = id
		}
	}
	if branch == 0 {
		t.Fatal("no branch page with two elements")
	}
	elem := func(b []byte, i uint64) []byte { return page(b, branch)[pages.PageHeaderSize+i*pages.ElementSize:] }
	// noFreelist makes the newest meta page record no freelist, as bbolt's
	// NoFreelistSync writes it, with a valid checksum: such a file is
	// refused, damaged or not.
	noFreelist := func(b []byte) {
		meta := page(b, uint64(h.newest))[pages.PageHeaderSize:]
		native.PutUint64(meta[32:], ^uint64(0))
		sum := fnv.New64a()
		sum.Write(meta[:56])
		native.PutUint64(meta[56:], sum.Sum64())
	}
	tests := []struct {
		name   string
		damage func(b []byte)
		want   string
	}{
		{"a branch points at itself", func(b []byte) { native.PutUint64(elem(b, 0)[8:], branch) }, "reached twice"},
		{"a branch points past the last page", func(b []byte) { native.PutUint64(elem(b, 0)[8:], m.High+5) }, "outside"},
		{"a branch key out of order", func(b []byte) {
			e := elem(b, 1)
			clear(e[native.Uint32(e) : native.Uint32(e)+native.Uint32(e[4:])])
		}, "out of order"},
		{"a branch key points past the page", func(b []byte) { native.PutUint32(elem(b, 0), 1<<20) }, "points past"},
		{"too many elements", func(b []byte) { native.PutUint16(page(b, branch)[10:], 0xffff) }, "do not fit"},
		{"a page says it is another", func(b []byte) { native.PutUint64(page(b, branch), branch+1) }, "says it is page"},
		{"the freelist lists a live page", func(b []byte) {
			fl := page(b, m.Freelist)
			native.PutUint16(fl[10:], 1)
			native.PutUint64(fl[pages.PageHeaderSize:], branch)
		}, "which is in use"},
		{"the file ends before the last page", nil, "the file holds"},
		// bbolt.Open reads the freelist itself: checked before it.
		{"the freelist claims more entries than its page holds", func(b []byte) {
			fl := page(b, m.Freelist)
			native.PutUint16(fl[10:], 0xFFFF)
			native.PutUint64(fl[pages.PageHeaderSize:], 1<<40)
		}, "do not fit"},
		{"the freelist page is another kind", func(b []byte) {
			native.PutUint16(page(b, m.Freelist)[8:], pages.LeafFlag)
		}, "is not the freelist"},
		{"no freelist, and a branch points at itself", func(b []byte) {
			noFreelist(b)
			native.PutUint64(elem(b, 0)[8:], branch)
		}, "no freelist"},
		{"no freelist, and a branch key out of order", func(b []byte) {
			noFreelist(b)
			e := elem(b, 1)
			clear(e[native.Uint32(e) : native.Uint32(e)+native.Uint32(e[4:])])
		}, "no freelist"},
		{"no freelist, sound", noFreelist, "no freelist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := append([]byte(nil), h.file...)
			if tt.damage != nil {
				tt.damage(b)
			} else {
				b = b[:(m.High-1)*ps]
			}
			path := store.Path(t.TempDir(), "p")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := openAndRead(path)
			if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrCorrupt saying %q", err, tt.want)
			}
			_, err = store.Open(path, store.Options{Timeout: time.Second, ReadOnly: true})
			if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("read-only open: err = %v, want ErrCorrupt saying %q", err, tt.want)
			}
		})
	}
}
