package store

import (
	"fmt"
	"os"
	"unsafe"

	bolt "go.etcd.io/bbolt"

	"github.com/cdi-exec/plugins/internal/store/internal/pages"
)

// The page graph of a store file is checked before bbolt follows a page
// (internal/store/internal/pages): what bbolt.Open reads, in the OpenFile hook
// under the file lock (precheck); the rest on bbolt's own mapping, right
// after bbolt.Open and before the first transaction (checkMapped). Both
// turn what they find into ErrCorrupt.

// precheck checks what bbolt.Open will read of the store file f.
func precheck(f *os.File, size int64) error {
	if err := pages.Precheck(f, size); err != nil {
		return fmt.Errorf("%s: %w: %v", f.Name(), ErrCorrupt, err)
	}
	return nil
}

// checkMapped verifies the page structure of db's file, size bytes under
// the lock, through bbolt's own mapping, which covers at least the whole
// file. It runs before db's first transaction; a fault past a truncated
// end is turned into ErrCorrupt by Open's guard.
func checkMapped(db *bolt.DB, size int64) error {
	info := db.Info()
	// The mapping is memory bbolt got from mmap, never Go's heap; Info is
	// bbolt's way of handing it out.
	data := *(**byte)(unsafe.Pointer(&info.Data))
	if err := pages.Check(unsafe.Slice(data, size)); err != nil {
		return fmt.Errorf("%s: %w: %v", db.Path(), ErrCorrupt, err)
	}
	return nil
}
