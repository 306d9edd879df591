package sysfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestReadFile reads files around the buffer's size: a read that fills
// the buffer must be followed by another, one that leaves room is the end.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 511, 512, 513, 1023, 1024, 1025, 5000} {
		want := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		path := filepath.Join(dir, "attr")
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readFile(path)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("size %d: read %d bytes, want %d", size, len(got), len(want))
		}
	}
	if _, err := readFile(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("missing file: %v, want not-exist", err)
	}
}
