package sysfs

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// VFs ends at the first missing virtfn link: a PF whose VFs are being
// removed one by one (virtfn0 gone first) has none, not the leftovers.
func TestVFsStopAtGap(t *testing.T) {
	pf := t.TempDir()
	for link, vf := range map[string]string{"virtfn1": "0000:03:00.1", "virtfn2": "0000:03:00.2"} {
		if err := os.Symlink("../"+vf, filepath.Join(pf, link)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := OpenDir(pf)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := VFs(d, 3); got != nil {
		t.Fatalf("virtfn1 and virtfn2 without virtfn0: VFs = %v", got)
	}
	if err := os.Symlink("../0000:03:00.0", filepath.Join(pf, "virtfn0")); err != nil {
		t.Fatal(err)
	}
	if got := VFs(d, 3); !reflect.DeepEqual(got, []string{"0000:03:00.0", "0000:03:00.1", "0000:03:00.2"}) {
		t.Fatalf("VFs = %v", got)
	}
	if got := VFs(d, 2); len(got) != 2 {
		t.Fatalf("VFs(2) = %v", got)
	}
}
