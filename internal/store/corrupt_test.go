package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// The corruption fuzz damages a real store file and opens it as a plugin
// does. Every outcome must be one of:
//
//   - the exact state of the last commit;
//   - ErrCorrupt, with the file left as it was (or a schema version
//     damaged into a newer one, refused as such: code 106 all the same);
//   - the state of the commit before, and only when the newest meta page
//     itself was damaged: bbolt then falls back to the older meta page,
//     which cannot be told from a crash that tore the newest one before
//     its commit was acknowledged (docs/reliability.md, Limits).
//
// When the damaged store reads correctly, one more write is made and the
// store read again: that must show the write on top of what was read, or
// ErrCorrupt. Damage to pages the read did not need (the freelist, free
// pages) could otherwise surface only in a later transaction.

var corruptionCases = flag.Int("corruption.cases", 300, "random cases TestCorruption runs")

// content is what a store holds, entry by entry: "r/<id>" and "d/<key>"
// mapped to the payloads, which the checksums make as good as decoded.
type content map[string]string

func readContent(s *Store) (content, error) {
	c := content{}
	err := s.View(func(tx *Tx) error {
		for k, v := range tx.v.recs {
			c["r/"+k] = string(v)
		}
		for k, v := range tx.v.devs {
			c["d/"+k] = v
		}
		return nil
	})
	return c, err
}

// history is a store file and the states of its last two commits.
type history struct {
	file        []byte
	prev, final content
	pageSize    int
	newest      int // index of the meta page of the last commit
}

func buildHistory(t testing.TB) *history {
	t.Helper()
	path := Path(t.TempDir(), "c")
	s, err := Open(path, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	update := func(fn func(tx *Tx) error) {
		if err := s.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	for batch := range 6 {
		update(func(tx *Tx) error {
			for i := batch * 50; i < (batch+1)*50; i++ {
				r := rec(fmt.Sprintf("req-%03d", i), fmt.Sprintf("0000:%02x:%02x.0", i/256, i%256), fmt.Sprintf("tty%d", i))
				r.Allocations[0].Spec = "gpu-with-a-longer-resource-spec"
				if err := tx.Put(r); err != nil {
					return err
				}
			}
			return nil
		})
	}
	update(func(tx *Tx) error {
		for i := 0; i < 300; i += 7 {
			if _, err := tx.Delete(fmt.Sprintf("req-%03d", i)); err != nil {
				return err
			}
		}
		return nil
	})
	h := &history{}
	if h.prev, err = readContent(s); err != nil {
		t.Fatal(err)
	}
	update(func(tx *Tx) error { return tx.Put(rec("last-add", "0000:ff:00.0", "tty999")) })
	if h.final, err = readContent(s); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if h.file, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	h.pageSize = os.Getpagesize()
	// The meta page with the higher transaction id is the newest; the
	// id sits after the 16-byte page header and 48 bytes of meta.
	if txid := func(p int) uint64 {
		return binary.LittleEndian.Uint64(h.file[p*h.pageSize+64:])
	}; txid(1) > txid(0) {
		h.newest = 1
	}
	return h
}

// damage applies the mutations that data encodes to a copy of file. Each
// mutation is a kind byte and its operands; up to four are applied.
func (h *history) damage(data []byte) []byte {
	b := append([]byte(nil), h.file...)
	next := func(n int) int { // the next n bytes of data as a number
		v := 0
		for range n {
			v <<= 8
			if len(data) > 0 {
				v |= int(data[0])
				data = data[1:]
			}
		}
		return v
	}
	for op := 0; op < 4 && len(data) > 0; op++ {
		switch next(1) % 5 {
		case 0: // flip bits of one byte
			if len(b) > 0 {
				b[next(3)%len(b)] ^= byte(max(next(1), 1))
			}
		case 1: // smash a run of bytes
			if len(b) > 0 {
				off, n, x := next(3)%len(b), 1+next(1), byte(max(next(1), 1))
				for i := off; i < min(off+n, len(b)); i++ {
					b[i] ^= x
				}
			}
		case 2: // zero a whole page
			if pages := len(b) / h.pageSize; pages > 0 {
				p := next(2) % pages
				clear(b[p*h.pageSize : (p+1)*h.pageSize])
			}
		case 3: // truncate
			if len(b) > 0 {
				b = b[:next(3)%len(b)]
			}
		case 4: // swap the two meta pages
			if len(b) >= 2*h.pageSize {
				p0 := append([]byte(nil), b[:h.pageSize]...)
				copy(b, b[h.pageSize:2*h.pageSize])
				copy(b[h.pageSize:], p0)
			}
		}
	}
	return b
}

// newestMetaChanged reports whether damaged differs from the original in
// the newest meta page.
func (h *history) newestMetaChanged(damaged []byte) bool {
	lo, hi := h.newest*h.pageSize, (h.newest+1)*h.pageSize
	return len(damaged) < hi || !bytes.Equal(damaged[lo:hi], h.file[lo:hi])
}

// check runs one case and fails t on any outcome but the three allowed.
func (h *history) check(t *testing.T, data []byte) { h.outcome(t, data) }

// outcome runs one case and names its outcome.
func (h *history) outcome(t *testing.T, data []byte) string {
	damaged := h.damage(data)
	path := Path(t.TempDir(), "c")
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := openAndRead(path)
	switch {
	case refused(err):
		if after, _ := os.ReadFile(path); !bytes.Equal(after, damaged) {
			t.Fatalf("a store found corrupt was written to (%v)", err)
		}
		return "corrupt"
	case err != nil:
		t.Fatalf("error other than ErrCorrupt: %v", err)
	case maps.Equal(got, h.final):
	case maps.Equal(got, h.prev) && h.newestMetaChanged(damaged):
	case maps.Equal(got, h.prev):
		t.Fatal("the previous commit's state was read, but the newest meta page is intact")
	default:
		t.Fatalf("silent loss: the store read as neither the last nor the previous commit (%d entries, want %d)", len(got), len(h.final))
	}
	kind := "last commit"
	if !maps.Equal(got, h.final) {
		kind = "previous commit"
	}
	kind += ", then " + h.writeAfter(t, path, got)
	if bytes.Equal(damaged, h.file) {
		return "undamaged" // proves nothing about damage
	}
	return kind
}

// writeAfter makes one more allocation on a damaged store that read
// correctly, and reads it back.
func (h *history) writeAfter(t *testing.T, path string, base content) string {
	s, err := Open(path, Options{Timeout: time.Second})
	if refused(err) {
		return "corrupt"
	}
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	r := rec("after-damage", "0000:fe:00.0")
	err = s.Update(func(tx *Tx) error { return tx.Put(r) })
	s.Close()
	if refused(err) {
		return "corrupt"
	}
	if err != nil {
		t.Fatalf("write after damage: %v", err)
	}
	got, err := openAndRead(path)
	if refused(err) {
		return "corrupt after the write"
	}
	if err != nil {
		t.Fatalf("read after the write: %v", err)
	}
	payload, _ := json.Marshal(r)
	want := maps.Clone(base)
	want["r/"+r.ID], want["d/0000:fe:00.0"] = string(payload), r.ID
	if !maps.Equal(got, want) {
		t.Fatalf("silent loss after a write on a damaged store: %d entries, want %d", len(got), len(want))
	}
	return "write kept"
}

// refused reports the errors by which a store refuses damage, all code
// 106 to a plugin: ErrCorrupt, or a schema version damaged into a newer
// one.
func refused(err error) bool { return errors.Is(err, ErrCorrupt) || errors.Is(err, errNewer) }

// openAndRead opens the store for writing, as a plugin's ADD does, and
// reads all of it.
func openAndRead(path string) (content, error) {
	s, err := Open(path, Options{Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return readContent(s)
}

// TestCorruption runs the aimed cases of seeds, then a fixed number of
// random ones (flag -corruption.cases), the same every run, so that make
// test stays short and deterministic; make fuzz and FuzzCorruption
// explore further. The cases must spread over the outcomes: damage the
// store refuses, damage it reads through (and writes on), and a torn
// newest commit it falls back from; cases that damaged nothing are few.
func TestCorruption(t *testing.T) {
	h := buildHistory(t)
	n := *corruptionCases
	if testing.Short() {
		n = 30
	}
	cases := h.seeds()
	rng := rand.New(rand.NewPCG(11, 11))
	for range n {
		data := make([]byte, 24)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		cases = append(cases, data)
	}
	seen := map[string]int{}
	for i, data := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) { seen[h.outcome(t, data)]++ })
	}
	t.Logf("%d cases: %v", len(cases), seen)
	for _, want := range []struct {
		outcome  string
		min, max int
	}{
		{"corrupt", len(cases) / 2, len(cases)},
		{"last commit, then write kept", len(cases) / 20, len(cases)},
		{"previous commit, then write kept", 1, len(cases)},
		{"undamaged", 0, len(cases) / 20},
	} {
		if got := seen[want.outcome]; got < want.min || got > want.max {
			t.Errorf("%d of %d cases ended %q, want %d to %d", got, len(cases), want.outcome, want.min, want.max)
		}
	}
}

// seeds are cases aimed at each outcome: they open FuzzCorruption's corpus
// and TestCorruption's run.
func (h *history) seeds() [][]byte {
	return [][]byte{
		{4},                        // swap the meta pages
		{2, 0, byte(h.newest)},     // zero the newest meta page
		{2, 0, byte(1 - h.newest)}, // zero the older one
		{2, 0, 2},                  // zero the first data page
		{3, 0, 0, 0},               // truncate to nothing
		{3, 0, 0x30, 0},            // truncate within the data
		{0, 0, 0x40, 0x10, 0x80},   // flip a byte in a data page
		{1, 0, 0x50, 0, 0xff, 0x55},
	}
}

func FuzzCorruption(f *testing.F) {
	h := buildHistory(f)
	for _, seed := range h.seeds() {
		f.Add(seed)
	}
	f.Fuzz(h.check)
}
