package store

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestStores(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"drm.db", "generic-tty.db", "drm.db.new-12", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "notes.txt")
	tests := []struct {
		dir     string
		want    []string
		wantErr bool
	}{
		{dir, []string{filepath.Join(dir, "drm.db"), filepath.Join(dir, "generic-tty.db")}, false},
		{filepath.Join(dir, "missing"), nil, false},
		{file, nil, true}, // not a directory: an error, never "no stores"
	}
	for _, tt := range tests {
		got, err := Stores(tt.dir)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("Stores(%s) = %v, %v; want %v (error %v)", tt.dir, got, err, tt.want, tt.wantErr)
		}
		if p := PluginOf(Path(tt.dir, "sriov")); p != "sriov" {
			t.Errorf("PluginOf(Path(_, sriov)) = %q", p)
		}
	}
}

func TestInspect(t *testing.T) {
	dir := t.TempDir()
	good := Path(dir, "drm")
	s := open(t, good)
	if err := s.Update(func(tx *Tx) error { return tx.Put(rec("pod-a", "k1")) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	garbage := Path(dir, "broken")
	if err := os.WriteFile(garbage, []byte("not a store, though long enough to look at"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := Path(dir, "missing")
	tests := []struct {
		path    string
		ids     []string
		wantErr error
	}{
		{good, []string{"pod-a"}, nil},
		{missing, nil, ErrNotExist},
		{garbage, nil, ErrCorrupt},
	}
	for _, tt := range tests {
		var ids []string
		err := Inspect(tt.path, time.Second, func(tx *Tx) error {
			return tx.ForEach(func(r *Record) error { ids = append(ids, r.ID); return nil })
		})
		if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) || !slices.Equal(ids, tt.ids) {
			t.Errorf("Inspect(%s) = %v, %v; want %v, %v", filepath.Base(tt.path), ids, err, tt.ids, tt.wantErr)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Inspect created %s", missing)
	}
}
