package inventory

import (
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// A key two configs report belongs to the first; unusable devices and keys
// a pinned ADD cannot name are not offered, but their holders count.
func TestMerge(t *testing.T) {
	inv := Merge([][]protocol.DeviceInfo{
		{
			{Key: "a", Usable: true, HeldBy: "x"},
			{Key: "b", Usable: false, HeldBy: "y"},
			{Key: "/sys/devices/platform/fb.0", Usable: true},
		},
		{
			{Key: "a", Usable: true, HeldBy: "z"},
			{Key: "c", Usable: true, HeldBy: "x"},
		},
	})
	want := Inventory{
		Devices: []protocol.DeviceInfo{{Key: "a", Usable: true, HeldBy: "x"}, {Key: "c", Usable: true, HeldBy: "x"}},
		Conf:    []int{0, 1},
		Skipped: []string{"/sys/devices/platform/fb.0"},
		Holders: []string{"x", "y", "z"},
	}
	if !reflect.DeepEqual(inv, want) {
		t.Errorf("Merge:\n got %+v\nwant %+v", inv, want)
	}
}

// A shared unit is its share devices; holders has an entry per held
// share, so an id holding two shares holds two share devices, the last.
func TestExpandShares(t *testing.T) {
	got := Expand([]protocol.DeviceInfo{{Key: "kvm", Usable: true, Shares: 4, Holders: []string{"a", "b", "b"}}})
	var held []string
	for _, d := range got {
		held = append(held, d.Key+"="+d.HeldBy)
	}
	if want := []string{"kvm=", "kvm-s1=b", "kvm-s2=b", "kvm-s3=a"}; !slices.Equal(held, want) {
		t.Errorf("Expand: %v, want %v", held, want)
	}
}

func TestGroupsAndOrder(t *testing.T) {
	inv := Inventory{
		Devices: []protocol.DeviceInfo{{Key: "a"}, {Key: "b"}, {Key: "c"}, {Key: "d"}},
		Conf:    []int{0, 1, 0, 2},
	}
	tests := []struct {
		name  string
		keys  []string
		order []string
		want  []Group
	}{
		{"one config", []string{"c", "a"}, []string{"a", "c"}, []Group{{0, []string{"c", "a"}}}},
		{"by config, first config first", []string{"d", "b", "a"}, []string{"a", "b", "d"},
			[]Group{{0, []string{"a"}}, {1, []string{"b"}}, {2, []string{"d"}}}},
		{"unknown keys go to the first config", []string{"zz", "b"}, []string{"b", "zz"},
			[]Group{{0, []string{"zz"}}, {1, []string{"b"}}}},
		{"nothing", nil, nil, nil},
	}
	for _, tt := range tests {
		if got := inv.Groups(tt.keys); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Groups(%v) = %v, want %v", tt.name, tt.keys, got, tt.want)
		}
		if got := inv.Order(tt.keys); !slices.Equal(got, tt.order) {
			t.Errorf("%s: Order(%v) = %v, want %v", tt.name, tt.keys, got, tt.order)
		}
	}
}

// flaky lists one device, and fails DEVICES while <dir>/fail exists.
const flaky = `#!/bin/sh
cat >/dev/null
case "$CDI_COMMAND" in
VERSION) echo '{"cdiVersion":"0.0.2","supportedVersions":["0.0.1","0.0.2"]}' ;;
DEVICES)
  if [ -e "$(dirname "$0")/fail" ]; then echo '{"code":100,"msg":"broken"}'; exit 100; fi
  echo '{"cdiVersion":"0.0.2","devices":[{"key":"d0","nodes":["/dev/null"],"numa":-1,"usable":true}]}' ;;
*) exit 3 ;;
esac
`

// A plugin that fails keeps its last answer; a cancelled refresh changes
// nothing.
func TestPollerKeepsLastAnswer(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "flaky"), []byte(flaky), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := caller.Config{File: "f.conf", Type: "thing", Plugin: "flaky",
		Raw: []byte(`{"cdiVersion":"0.0.2","name":"f","type":"thing","plugin":"flaky"}`)}
	p := NewPoller(caller.Caller{Path: dir, Timeout: 10 * time.Second}, []caller.Config{conf}, slog.New(slog.DiscardHandler))
	if failed, ok := p.Refresh(t.Context()); failed != 0 || !ok {
		t.Fatalf("Refresh = %d, %v", failed, ok)
	}
	keys := func() []string {
		var out []string
		for _, d := range p.Inventory().Devices {
			out = append(out, d.Key)
		}
		return out
	}
	if got := keys(); !slices.Equal(got, []string{"d0"}) {
		t.Fatalf("devices %v", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if failed, ok := p.Refresh(t.Context()); failed != 1 || !ok {
		t.Fatalf("Refresh of a failing plugin = %d, %v", failed, ok)
	}
	if got := keys(); !slices.Equal(got, []string{"d0"}) {
		t.Fatalf("devices after a failure %v, want the last answer", got)
	}
	if i, d, ok := p.Reported("d0"); !ok || i != 0 || d.Key != "d0" {
		t.Fatalf("Reported(d0) = %d, %+v, %v", i, d, ok)
	}
	if _, _, ok := p.Reported("d1"); ok {
		t.Fatal("Reported(d1): a key nobody reports")
	}
}

// Every config Configs loads has a cdi_spec, its own or the one it is
// given, and Spec reads it back.
func TestConfigsSpec(t *testing.T) {
	dir := t.TempDir()
	for name, conf := range map[string]string{
		"tty.d/own.conf":   `{"cdiVersion":"0.0.2","name":"a","type":"tty","plugin":"generic-tty","args":{"cdi_spec":{"kind":"example.com/tty","dir":"/run/own"}}}`,
		"tty.d/given.conf": `{"cdiVersion":"0.0.2","name":"b","type":"tty","plugin":"generic-tty"}`,
	} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	byType, _, err := Configs(dir, nil, "cdi-exec.io", "/var/run/cdi")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "example.com/tty /run/own", "b": "cdi-exec.io/tty /var/run/cdi"}
	for _, c := range byType["tty"] {
		spec, err := Spec(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := spec.Kind + " " + spec.Dir; got != want[c.Name] {
			t.Errorf("%s: spec %s, want %s", c.Name, got, want[c.Name])
		}
	}
	if _, err := Spec(caller.Config{File: "x.conf", Raw: []byte(`{"args":{}}`)}); err == nil || !strings.Contains(err.Error(), "x.conf: no cdi_spec") {
		t.Errorf("a config without cdi_spec: %v", err)
	}
}

// TestMergeShared: a shared unit's own entry is kept by key, the first
// config's, beside its share devices; an unshared device has none.
func TestMergeShared(t *testing.T) {
	inv := Merge([][]protocol.DeviceInfo{
		{{Key: "kvm", Usable: true, Shares: 3, Holders: []string{"x"}}, {Key: "tty1", Usable: true}},
		{{Key: "kvm", Usable: true, Shares: 3, Holders: []string{"y"}}},
	})
	kvm, ok := inv.Shared["kvm"]
	if !ok || kvm.Shares != 3 || !slices.Equal(kvm.Holders, []string{"x"}) || len(inv.Shared) != 1 {
		t.Fatalf("shared units %+v", inv.Shared)
	}
	var keys []string
	for _, d := range inv.Devices {
		keys = append(keys, d.Key)
	}
	if !slices.Equal(keys, []string{"kvm", "kvm-s1", "kvm-s2", "tty1"}) {
		t.Fatalf("devices %v", keys)
	}
}

// A unit of unlimited shares is bound to n shares, never fewer than its
// holders; bound to one it is a device of its own; other devices stay.
func TestBound(t *testing.T) {
	kvm := func(holders ...string) protocol.DeviceInfo {
		return protocol.DeviceInfo{Key: "kvm", Usable: true, Unlimited: true, Holders: holders}
	}
	fuse := protocol.DeviceInfo{Key: "fuse", Usable: true, Shares: 3, Holders: []string{"a"}}
	tests := []struct {
		name string
		dev  protocol.DeviceInfo
		n    int
		want protocol.DeviceInfo
	}{
		{"pods", kvm("a", "b"), 110, protocol.DeviceInfo{Key: "kvm", Usable: true, Shares: 110, Holders: []string{"a", "b"}}},
		{"more holders than pods", kvm("a", "b", "c"), 2, protocol.DeviceInfo{Key: "kvm", Usable: true, Shares: 3, Holders: []string{"a", "b", "c"}}},
		{"one pod, held", kvm("a"), 1, protocol.DeviceInfo{Key: "kvm", Usable: true, HeldBy: "a"}},
		{"no pods, free", kvm(), 0, protocol.DeviceInfo{Key: "kvm", Usable: true}},
		{"numbered shares", fuse, 110, fuse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []protocol.DeviceInfo{tt.dev}
			got := Bound(in, tt.n)
			if !reflect.DeepEqual(got, []protocol.DeviceInfo{tt.want}) {
				t.Errorf("Bound(%+v, %d) = %+v, want %+v", tt.dev, tt.n, got, tt.want)
			}
			if !reflect.DeepEqual(in[0], tt.dev) {
				t.Errorf("Bound changed its argument: %+v", in[0])
			}
		})
	}
}
