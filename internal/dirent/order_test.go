package dirent

import (
	"encoding/binary"
	"testing"
)

// Each reads a record's numbers in the machine's own byte order, as the
// kernel writes them: a record built with binary.NativeEndian, with an
// inode number and a record length whose bytes differ, decodes to those
// values on any machine.
func TestEachNativeOrder(t *testing.T) {
	name := make([]byte, 260) // a record longer than 255 bytes: reclen's high byte counts
	for i := range name {
		name[i] = 'a' + byte(i%26)
	}
	rec := make([]byte, 19+len(name)+5) // NUL and padding to 8 bytes
	const ino = 0x0102030405060708
	binary.NativeEndian.PutUint64(rec[0:8], ino)
	binary.NativeEndian.PutUint16(rec[16:18], uint16(len(rec)))
	rec[18] = 8 // DT_REG
	copy(rec[19:], name)
	var n int
	Each(rec, func(got []byte, gotIno uint64, typ uint8) {
		n++
		if string(got) != string(name) || gotIno != ino || typ != 8 {
			t.Errorf("entry %q ino %#x type %d, want %q ino %#x type 8", got, gotIno, typ, name, uint64(ino))
		}
	})
	if n != 1 {
		t.Errorf("%d entries, want 1", n)
	}
}
