package cache

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// host is a fake kernel tree: a boot id, a sequence number, a sysfs
// directory and a devtmpfs directory.
type host struct {
	t    testing.TB
	root string
}

func newHost(t testing.TB) *host {
	h := &host{t: t, root: t.TempDir()}
	h.write("boot_id", "8f1e-boot-1\n")
	h.write("seqnum", "100\n")
	h.mkdir("class")
	h.mkdir("dri")
	h.write("class/card0", "")
	h.write("dri/card0", "")
	long := time.Now().Add(-time.Hour)
	if err := os.Chtimes(h.path("dri"), long, long); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *host) path(p string) string { return filepath.Join(h.root, p) }

func (h *host) write(p, s string) {
	h.t.Helper()
	if err := os.WriteFile(h.path(p), []byte(s), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *host) mkdir(p string) {
	h.t.Helper()
	if err := os.MkdirAll(h.path(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
}

func (h *host) bump() {
	b, _ := os.ReadFile(h.path("seqnum"))
	n, _ := strconv.Atoi(string(bytes.TrimSpace(b)))
	h.write("seqnum", strconv.Itoa(n+1)+"\n")
}

func (h *host) cache(state string) *Cache {
	return New(state, "p", "facts v1", Watch{Boot: h.path("boot_id"), Seqnum: h.path("seqnum"),
		Sys: []string{h.path("class")}, Dev: []string{h.path("dri")}})
}

// TestLoad: facts saved under a stamp come back while nothing the watch
// covers changed, and not after any change it covers.
func TestLoad(t *testing.T) {
	tests := []struct {
		name   string
		change func(h *host)
		fresh  bool
	}{
		{"nothing", func(*host) {}, true},
		{"seqnum moved, same listings", (*host).bump, true},
		{"entry added, seqnum moved", func(h *host) { h.write("class/card1", ""); h.bump() }, false},
		{"entry re-created, same name", func(h *host) {
			h.write("class/card0.new", "")
			if err := os.Rename(h.path("class/card0.new"), h.path("class/card0")); err != nil {
				t.Fatal(err)
			}
			h.bump()
		}, false},
		{"/dev entry removed, no uevent", func(h *host) {
			if err := os.Remove(h.path("dri/card0")); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"reboot", func(h *host) { h.write("boot_id", "8f1e-boot-2\n") }, false},
		{"no seqnum, same listings", func(h *host) {
			if err := os.Remove(h.path("seqnum")); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"no seqnum, entry gone", func(h *host) {
			if err := os.Remove(h.path("seqnum")); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(h.path("class/card0")); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	reads := []struct {
		name string
		get  func(c *Cache) ([]byte, *Stamp)
		want string
	}{{"Load", (*Cache).Load, "the facts"}, {"Summary", (*Cache).Summary, "sum"}}
	for _, tt := range tests {
		for _, rd := range reads {
			t.Run(tt.name+"/"+rd.name, func(t *testing.T) {
				h := newHost(t)
				c := h.cache(t.TempDir())
				if got, st := rd.get(c); got != nil || st == nil {
					t.Fatalf("empty cache: %q, stamp %v", got, st)
				}
				if err := c.Save(c.Begin(), []byte("sum"), []byte("the facts")); err != nil {
					t.Fatal(err)
				}
				tt.change(h)
				got, st := rd.get(c)
				if fresh := got != nil; fresh != tt.fresh {
					t.Fatalf("fresh = %v, want %v", fresh, tt.fresh)
				}
				if tt.fresh && string(got) != rd.want || !tt.fresh && st == nil {
					t.Fatalf("got %q, stamp %v", got, st)
				}
			})
		}
	}
}

// TestStampRewritten: once the listings proved a moved sequence number
// harmless, the file carries the new number and the next Load lists
// nothing.
func TestStampRewritten(t *testing.T) {
	for _, get := range []func(c *Cache) ([]byte, *Stamp){(*Cache).Load, (*Cache).Summary} {
		h := newHost(t)
		c := h.cache(t.TempDir())
		if err := c.Save(c.Begin(), []byte("sum"), []byte("x")); err != nil {
			t.Fatal(err)
		}
		h.bump()
		if got, _ := get(c); got == nil {
			t.Fatal("not fresh")
		}
		listed := 0
		c.watch.List = func(string, func([]byte, uint64, uint8)) error { listed++; return nil }
		for _, get := range []func(c *Cache) ([]byte, *Stamp){(*Cache).Load, (*Cache).Summary} {
			if got, _ := get(c); got == nil || listed != 0 {
				t.Fatalf("%q after %d listings", got, listed)
			}
		}
	}
}

// TestRacy: a /dev directory changed within the clock's resolution of the
// stamp proves nothing, so the next Load compares its listing. Its time
// is set ahead of the clock (as a coarse file system clock can be), so
// that it is not older than racy however long the machine takes to get
// to the stamp.
func TestRacy(t *testing.T) {
	h := newHost(t)
	ahead := time.Now().Add(time.Hour)
	if err := os.Chtimes(h.path("dri"), ahead, ahead); err != nil {
		t.Fatal(err)
	}
	c := h.cache(t.TempDir())
	if err := c.Save(c.Begin(), nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	listed := 0
	c.watch.List = func(dir string, fn func([]byte, uint64, uint8)) error { listed++; return nil }
	for _, get := range []func(c *Cache) ([]byte, *Stamp){(*Cache).Load, (*Cache).Summary} {
		listed = 0
		get(c)
		if listed == 0 {
			t.Fatal("a racy stamp was trusted without listing")
		}
	}
}

// TestFile: the file is 0600, a damaged one or one of another key is not
// trusted, and a host without a boot id or a missing state directory
// saves nothing.
func TestFile(t *testing.T) {
	h := newHost(t)
	state := t.TempDir()
	c := h.cache(state)
	if err := c.Save(c.Begin(), []byte("sum"), []byte("facts")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(c.Path())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%v %v", fi, err)
	}
	good, _ := os.ReadFile(c.Path())
	body := len(good) - len("facts")
	damaged := func(what string, bad []byte, headOK bool) {
		t.Helper()
		if err := os.WriteFile(c.Path(), bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if facts, _ := c.Load(); facts != nil {
			t.Fatalf("%s: Load trusted %q", what, facts)
		}
		// Summary reads only the head: it trusts a damaged body, never a
		// damaged head, nor a file of another length than the head says.
		if sum, _ := c.Summary(); (sum != nil) != headOK || headOK && string(sum) != "sum" {
			t.Fatalf("%s: Summary = %q", what, sum)
		}
	}
	for i := range good {
		bad := bytes.Clone(good)
		bad[i] ^= 0x40
		damaged(fmt.Sprintf("byte %d flipped", i), bad, i >= body)
	}
	for i := range good {
		damaged(fmt.Sprintf("cut to %d bytes", i), good[:i], false)
	}
	damaged("a byte appended", append(bytes.Clone(good), 0), false)
	old := bytes.Clone(good) // format version 1, checksummed: another format
	old[fixed] = 1
	binary.LittleEndian.PutUint64(old[len(magic):], sum(old[fixed-4:body]))
	damaged("version 1", old, false)
	if err := os.WriteFile(c.Path(), good, 0o600); err != nil {
		t.Fatal(err)
	}
	other := New(state, "p", "facts v2", c.watch)
	if facts, _ := other.Load(); facts != nil {
		t.Fatal("another key's facts were trusted")
	}
	if err := os.Remove(h.path("boot_id")); err != nil {
		t.Fatal(err)
	}
	if facts, st := c.Load(); facts != nil || st != nil {
		t.Fatalf("no boot id: facts %q, stamp %v", facts, st)
	}
	gone := New(filepath.Join(state, "missing"), "p", "k", newHost(t).cache(state).watch)
	if err := gone.Save(gone.Begin(), nil, []byte("x")); err == nil {
		t.Fatal("saved into a state directory that does not exist")
	}
}

// FuzzDecode: any file either fails to decode or gives facts and a
// summary that were checksummed: never a panic. A file that decodes whole
// has a head that decodes alone, to the same summary.
// checkEncoded encodes a file made of b (a random input almost never
// carries valid checksums, so decoding b alone rarely gets past them):
// it decodes to what was encoded, head and whole, and a change of any one
// byte is refused.
func checkEncoded(t *testing.T, c *Cache, b []byte) {
	t.Helper()
	cut := 0
	if len(b) > 0 {
		cut = int(b[0]) % len(b)
	}
	st := &Stamp{boot: string(b[:cut/2]), seq: uint64(len(b)), hasSeq: cut%2 == 0, times: []int64{int64(cut) - 1},
		sys: []listing{{uint64(cut), uint64(len(b))}}, dev: []listing{{1, uint64(cut)}}}
	summary, facts := b[:cut], b[cut:]
	enc := c.encode(st, summary, facts)
	file, err := c.decode(enc)
	if err != nil || !bytes.Equal(file.summary, summary) || !bytes.Equal(file.facts, facts) || !bytes.Equal(file.st.append(nil), st.append(nil)) {
		t.Fatalf("an encoded file decodes as %+v, %v", file, err)
	}
	if h, err := c.decodeHead(enc, len(enc)); err != nil || !bytes.Equal(h.summary, summary) || !bytes.Equal(h.st.append(nil), st.append(nil)) {
		t.Fatalf("an encoded file's head decodes as %+v, %v", h, err)
	}
	for i := range enc {
		enc[i] ^= 1 << (i % 8)
		if _, err := c.decode(enc); err == nil {
			t.Fatalf("a file with byte %d of %d changed decodes", i, len(enc))
		}
		enc[i] ^= 1 << (i % 8)
	}
}

func FuzzDecode(f *testing.F) {
	c := New("/nonexistent", "p", "k", Watch{})
	st := &Stamp{boot: "b", seq: 7, hasSeq: true, times: []int64{1}, sys: []listing{{1, 2}}, dev: []listing{{3, 4}}}
	f.Add(c.encode(st, []byte("sum"), []byte("facts")))
	f.Add(c.encode(st, nil, nil))
	f.Add([]byte("CDIcache"))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkEncoded(t, c, b)
		h, herr := c.decodeHead(b, len(b))
		file, err := c.decode(b)
		if err != nil {
			return
		}
		if herr != nil || !bytes.Equal(h.summary, file.summary) || h.st.boot != file.st.boot {
			t.Fatalf("the whole file decodes, its head alone: %v", herr)
		}
		if again := c.encode(file.st, file.summary, file.facts); !bytes.Equal(again, b) {
			// Varints may be spelled longer than needed; the stamp must
			// still read back the same.
			f2, err := c.decode(again)
			if err != nil || !bytes.Equal(f2.facts, file.facts) || !bytes.Equal(f2.summary, file.summary) ||
				f2.st.boot != file.st.boot || f2.st.seq != file.st.seq {
				t.Fatalf("re-encoding changed the file")
			}
		}
	})
}

// TestLongKey: a head longer than the first read of Summary (a long host
// root in the key) is read whole.
func TestLongKey(t *testing.T) {
	h := newHost(t)
	state := t.TempDir()
	c := New(state, "p", strings.Repeat("k", 3*headRead), h.cache(state).watch)
	if err := c.Save(c.Begin(), []byte("sum"), []byte("facts")); err != nil {
		t.Fatal(err)
	}
	fd, size, err := c.open()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if f, err := c.readHead(fd, size); err != nil || string(f.summary) != "sum" || f.facts != nil {
		t.Fatalf("reading the head: %+v, %v", f, err)
	}
	if sum, st := c.Summary(); string(sum) != "sum" || st != nil {
		t.Fatalf("Summary = %q, %v", sum, st)
	}
	if facts, st := c.Load(); string(facts) != "facts" || st != nil {
		t.Fatalf("Load = %q, %v", facts, st)
	}
}

// TestSweep: a temporary file a killed writer left behind goes with the
// next write once it is old; a fresh one (a writer at work) stays.
func TestSweep(t *testing.T) {
	h := newHost(t)
	state := t.TempDir()
	c := h.cache(state)
	old, fresh := c.Path()+".tmp-1", c.Path()+".tmp-2"
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("torn"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-time.Hour)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}
	if err := c.Save(c.Begin(), nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("old temporary file kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh temporary file removed: %v", err)
	}
}

// BenchmarkLoad is a cache hit with 50 KB of facts (about 1024 GPUs):
// Load reads and checks the whole file, Summary only its head.
func BenchmarkLoad(b *testing.B) {
	h := newHost(b)
	state := b.TempDir()
	c := h.cache(state)
	if err := c.Save(c.Begin(), make([]byte, 16), bytes.Repeat([]byte("facts"), 10<<10)); err != nil {
		b.Fatal(err)
	}
	for _, get := range []struct {
		name string
		fn   func(c *Cache) ([]byte, *Stamp)
	}{{"whole", (*Cache).Load}, {"head", (*Cache).Summary}} {
		b.Run(get.name, func(b *testing.B) {
			for b.Loop() {
				if got, _ := get.fn(c); got == nil {
					b.Fatal("miss")
				}
			}
		})
	}
}
