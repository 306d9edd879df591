package devname

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/cdi-exec/plugins/pkg/request"
)

// FuzzKey checks that every name Key accepts is a DNS label that Name
// gives back for the key, so the mapping is one to one.
func FuzzKey(f *testing.F) {
	for _, s := range []string{"tty13", "pci-0000-03-00-0", "x-tty-s0", "x--0", "x-a-4", "x-", "pci-0000-03-00-8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		key, err := Key(name)
		if err != nil {
			return
		}
		if err := request.ValidDeviceKey(key); err != nil {
			t.Fatalf("Key(%q) = %q, not a valid key: %v", name, key, err)
		}
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Fatalf("Key accepted %q, which is not a DNS label: %v", name, errs)
		}
		if back, err := Name(key); err != nil || back != name {
			t.Fatalf("Name(Key(%q)) = %q, %v", name, back, err)
		}
	})
}

// FuzzName checks that every name made is a DNS label and maps back.
func FuzzName(f *testing.F) {
	for _, s := range []string{"tty13", "0000:03:00.0", "ttyUSB0", "a_b.c:d", "-", "ZZ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		name, err := Name(key)
		if err != nil {
			return
		}
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Fatalf("Name(%q) = %q, not a DNS label: %v", key, name, errs)
		}
		if back, err := Key(name); err != nil || back != key {
			t.Fatalf("Key(Name(%q)) = %q, %v", key, back, err)
		}
	})
}
