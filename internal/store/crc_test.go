package store

import (
	"hash/crc64"
	"math/rand/v2"
	"testing"
)

// TestCRC compares crcUpdate with crc64's CRC-64/ECMA on inputs of every
// length up to 80 and random bytes, in one piece and in two.
func TestCRC(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	table := crc64.MakeTable(crc64.ECMA)
	for i := range 20000 {
		b := make([]byte, i%81)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		cut := rng.IntN(len(b) + 1)
		if got, want := crcUpdate(crcUpdate(0, b[:cut]), b[cut:]), crc64.Checksum(b, table); got != want {
			t.Fatalf("crcUpdate(%x) cut at %d = %#x, want %#x", b, cut, got, want)
		}
	}
}

// FuzzCRC: the CRC is crc64's CRC-64/ECMA, in one piece or in two.
func FuzzCRC(f *testing.F) {
	f.Add([]byte("123456789"), 3)
	f.Add([]byte{}, 0)
	f.Add([]byte("a record of more than sixteen bytes, read eight at a time"), 11)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		table := crc64.MakeTable(crc64.ECMA)
		if got, want := crcUpdate(0, b), crc64.Checksum(b, table); got != want {
			t.Fatalf("crcUpdate(%q) = %#x, want %#x", b, got, want)
		}
		if cut < 0 || cut > len(b) {
			return
		}
		if got, want := crcUpdate(crcUpdate(0, b[:cut]), b[cut:]), crc64.Update(crc64.Update(0, table, b[:cut]), table, b[cut:]); got != want {
			t.Fatalf("in two pieces: %#x, want %#x", got, want)
		}
	})
}
