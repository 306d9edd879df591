package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The read-only API, for tools that inspect the stores of a node without
// owning them (cdictl ls, cdictl check). It never creates, changes or
// repairs a store, and holds a store's shared lock for one read
// transaction only, so plugins wait at most that long.

// Stores returns the store files in stateDir, sorted by name. A state
// directory that does not exist holds no stores; one that cannot be read
// (permissions, not a directory) is an error.
func Stores(stateDir string) ([]string, error) {
	ents, err := os.ReadDir(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading state directory: %w", err)
	}
	var files []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".db") {
			files = append(files, filepath.Join(stateDir, e.Name()))
		}
	}
	return files, nil
}

// PluginOf returns the plugin whose store is the file path; the inverse of
// Path.
func PluginOf(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".db")
}

// Inspect opens the store at path read-only with a shared lock, waiting at
// most timeout for it, runs fn in one read transaction and closes the
// store. A file that does not exist is ErrNotExist; one that cannot be
// opened or read is returned as the error, never created or repaired.
func Inspect(path string, timeout time.Duration, fn func(*Tx) error) error {
	s, err := Open(path, Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		return err
	}
	defer s.Close()
	return s.View(fn)
}
