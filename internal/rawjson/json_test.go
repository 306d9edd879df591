package rawjson

import (
	"bytes"
	"encoding/json"
	"testing"
)

// reference is EncodeObject as encoding/json alone writes it: every key
// with json.Marshal, every value with json.MarshalIndent.
func reference(fields []Field) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("{\n")
	for i, f := range fields {
		k, err := json.Marshal(f.Key)
		if err != nil {
			return nil, err
		}
		v, err := json.MarshalIndent(f.Value, "  ", "  ")
		if err != nil {
			return nil, err
		}
		b.WriteString("  ")
		b.Write(k)
		b.WriteString(": ")
		b.Write(v)
		if i < len(fields)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// device is a struct with tags and omitempty, as the plugins' answers hold.
type device struct {
	Key    string   `json:"key"`
	Nodes  []string `json:"nodes"`
	NUMA   int      `json:"numa"`
	Usable bool     `json:"usable"`
	Reason string   `json:"reason,omitempty"`
}

func TestEncodeObject(t *testing.T) {
	tests := [][]Field{
		{{"cdiVersion", "0.0.2"}, {"gpu", 64}},
		{{"cdiVersion", "0.0.2"}, {"devices", []string{"/dev/dri/card0", "/dev/dri/renderD128"}}, {"numa_locality", []int{0, 1}}},
		{{"cdiVersion", "0.0.2"}, {"devices", []string{}}, {"numa_locality", []int{}}, {"none", []string(nil)}, {"nil", []int(nil)}},
		{{"cdiVersion", "0.0.1"}, {"code", 103}, {"msg", "Insufficient free resources"}, {"details", "gpu: want 2, 1 free <&> \"q\" \\ \t\n\r\b\f\x00\x1f\x7f é \u2028\u2029 \xff\xfe"}},
		{{"neg", -5}, {"<key>", "v"}, {"devices", []device{{Key: "0000:03:00.0", Nodes: []string{"/dev/dri/card0"}, NUMA: -1, Usable: true}}}},
		{},
	}
	for _, fields := range tests {
		got, err := EncodeObject(fields)
		want, werr := reference(fields)
		if err != nil || werr != nil || !bytes.Equal(got, want) {
			t.Errorf("EncodeObject(%v) =\n%s (%v)\nwant\n%s (%v)", fields, got, err, want, werr)
		}
	}
}

// FuzzEncodeObject: for any strings and numbers, the hand-written encoder
// prints exactly what encoding/json prints.
func FuzzEncodeObject(f *testing.F) {
	f.Add("cdiVersion", "0.0.2", "/dev/dri/card0", 7, 3, true)
	f.Add("k<>&", "\u2028\xff\"\\\x01", "", -1, 0, false)
	f.Fuzz(func(t *testing.T, key, value, elem string, n, m int, empty bool) {
		list, nums := []string{elem, value, key}, []int{n, m}
		if empty {
			list, nums = []string{}, nil
		}
		fields := []Field{{key, value}, {value, n}, {elem, list}, {"numa", nums}}
		got, err := EncodeObject(fields)
		want, werr := reference(fields)
		if err != nil || werr != nil || !bytes.Equal(got, want) {
			t.Fatalf("EncodeObject(%q) =\n%s (%v)\nwant\n%s (%v)", fields, got, err, want, werr)
		}
	})
}
