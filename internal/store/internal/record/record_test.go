package record

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func sampleRecords() []*Record {
	at := time.Date(2026, 11, 22, 14, 5, 6, 789000000, time.UTC)
	return []*Record{
		{ID: "a", Type: "gpu", Allocations: []Allocation{{Spec: "gpu", Amount: 1, Created: at,
			Devices: []Device{{Key: "0000:03:00.0", Nodes: []string{"/dev/dri/card0", "/dev/dri/renderD128"}, NUMA: 1}}}}},
		{ID: "b", Type: "vgpu", Allocations: []Allocation{{Spec: "vgpu-x", Amount: 2, Created: at, Delegate: "drm",
			Nodes: []string{"/dev/vfio/1", "/dev/vfio/vfio"}, Devices: []Device{{Key: "k", Nodes: nil, NUMA: -1}, {Key: "<&>\"\\\u2028\xff", Nodes: []string{}, NUMA: 0}}}}},
		{ID: "c", Type: "tty"},
		{ID: "k", Type: "tty", Owner: "kubernetes", Allocations: []Allocation{{Spec: "tty", Amount: 1, Created: at, Devices: []Device{{Key: "tty3", Nodes: []string{"/dev/tty3"}, NUMA: -1}}}}},
		{ID: "d", Type: "t", Allocations: []Allocation{}},
		{ID: "e", Type: "t", Allocations: []Allocation{{Devices: []Device{}, Nodes: []string{}}}},
	}
}

// TestRecordCodec: the hand-written codec writes what encoding/json
// writes and reads it back as encoding/json does, owner or not.
func TestRecordCodec(t *testing.T) {
	for _, r := range sampleRecords() {
		checkRecord(t, r)
	}
}

func checkRecord(t *testing.T, r *Record) {
	t.Helper()
	got, err := Marshal(r)
	want, werr := json.Marshal(r)
	if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("Marshal(%+v) =\n%s %v\nwant\n%s %v", r, got, err, want, werr)
	}
	if err != nil {
		return
	}
	checkDecode(t, want)
}

// checkDecode: Unmarshal agrees with json.Unmarshal, error or not.
func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	var fast, slow Record
	err := Unmarshal(b, &fast)
	werr := json.Unmarshal(b, &slow)
	if (err == nil) != (werr == nil) || err == nil && !reflect.DeepEqual(fast, slow) {
		t.Fatalf("Unmarshal(%q) = %+v %v, want %+v %v", b, fast, err, slow, werr)
	}
}

// FuzzRecordCodec: for any record built from the fuzzer's strings and
// numbers, the codec writes what encoding/json writes; for any bytes at
// all, it reads what encoding/json reads.
func FuzzRecordCodec(f *testing.F) {
	for _, r := range sampleRecords() {
		b, _ := json.Marshal(r)
		f.Add(r.ID, "gpu", "/dev/dri/card0", 3, int64(1700000000123456789), false, b)
	}
	f.Add("x", "\u2028", "", -1, int64(0), true, []byte(`{"id":"a","ID":"b","type":"t","allocations":null}`))
	f.Add("x", "t", "", 0, int64(0), true, []byte(`{"id":"a","type":"t","allocations":null,"owner":""}`))
	f.Fuzz(func(t *testing.T, id, spec, node string, n int, ns int64, empty bool, raw []byte) {
		nodes := []string{node, spec}
		if empty {
			nodes = nil
		}
		r := &Record{ID: id, Type: spec, Allocations: []Allocation{{Spec: spec, Amount: n, Created: time.Unix(0, ns).UTC(),
			Devices: []Device{{Key: node, Nodes: nodes, NUMA: n}}, Nodes: nodes, Delegate: node}}, Owner: spec}
		checkRecord(t, r)
		checkDecode(t, raw)
	})
}

// TestOldRecord: a record written before owners were kept (no "owner")
// reads with an empty owner, and one with an owner reads it back.
func TestOldRecord(t *testing.T) {
	var r Record
	if err := Unmarshal([]byte(`{"id":"a","type":"tty","allocations":null}`), &r); err != nil || r.Owner != "" || r.ID != "a" {
		t.Fatalf("old record: %+v %v", r, err)
	}
	if err := Unmarshal([]byte(`{"id":"a","type":"tty","allocations":null,"owner":"kubernetes"}`), &r); err != nil || r.Owner != "kubernetes" {
		t.Fatalf("owned record: %+v %v", r, err)
	}
}

// An allocation's type is its spec's, whatever the record's type.
func TestAllocationType(t *testing.T) {
	for spec, want := range map[string]string{
		"kvm":         "kvm",
		"gpu-memory":  "gpu",
		"vgpu":        "vgpu",
		"gpu-mig1g10": "gpu",
		"not a spec!": "not a spec!",
	} {
		if got := (&Allocation{Spec: spec}).Type(); got != want {
			t.Errorf("Type of %q = %q, want %q", spec, got, want)
		}
	}
}
