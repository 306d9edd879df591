package rawjson

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

type strictArgs struct {
	Reserved int                        `json:"num_system_reserved"`
	Small    int8                       `json:"small"`
	Count    uint16                     `json:"count"`
	Ratio    float32                    `json:"ratio"`
	On       *bool                      `json:"on"`
	Flag     bool                       `json:"flag"`
	Ints     []int                      `json:"ints"`
	Raw      json.RawMessage            `json:"raw"`
	Map      map[string]json.RawMessage `json:"map"`
	hidden   int                        //lint:ignore U1000 an unexported field no member may set
	Skipped  int                        `json:"-"`
	Untagged string
	Pattern  string   `json:"pattern"`
	List     []string `json:"list"`
	Inner    *struct {
		Plugin string          `json:"plugin"`
		Args   json.RawMessage `json:"args"`
	} `json:"inner"`
	Items []struct {
		Name string `json:"name"`
	} `json:"items"`
}

func TestDecodeStrict(t *testing.T) {
	tests := []struct {
		in   string
		err  string // "" for success
		want int    // Reserved, on success
	}{
		{`{"num_system_reserved": 12}`, "", 12},
		{`{"num_system_reserved": 12, "NUM_SYSTEM_RESERVED": 0}`, `"NUM_SYSTEM_RESERVED" is not "num_system_reserved"`, 0},
		{`{"Num_System_Reserved": 3}`, `"Num_System_Reserved" is not`, 0},
		{`{"num_system_reserved": 12, "num_system_reserved": 0}`, `"num_system_reserved" is given twice`, 0},
		{`{"num_system_reserved": 1, "num_syſtem_reserved": 2}`, `is not "num_system_reserved"`, 0}, // long s folds to s
		{`{"patterK": "x"}`, `unknown field "patterK"; did you mean "pattern"?`, 0},
		{`{"num_system_reserve": 3}`, `unknown field "num_system_reserve"; did you mean "num_system_reserved"?`, 0},
		{`{"inner": {"plugins": "drm"}}`, `unknown field "inner.plugins"; did you mean "inner.plugin"?`, 0},
		{`{"zzz": 1}`, `unknown field "zzz"`, 0},
		{`{"pattern": "ttyS", "PATTERN": "tty"}`, `"PATTERN" is not "pattern"`, 0},
		{`{"inner": {"plugin": "drm", "Plugin": "x"}}`, `"inner.Plugin" is not "inner.plugin"`, 0},
		{`{"inner": {"plugin": "drm", "args": {"A": 1, "a": 2}}}`, "", 0}, // a delegate's args are its own
		{`{"inner": {"plugin": "a", "plugin": "b"}}`, `"inner.plugin" is given twice`, 0},
		{`{"items": [{"name": "a"}, {"NAME": "b"}]}`, `"items[1].NAME" is not "items[1].name"`, 0},
		{`{"list": ["a", "A"]}`, "", 0},
		{`{"num_system_reserved": 1} {}`, "after top-level value", 0},
		{`{"num_system_reserved": "x"}`, `field "num_system_reserved": cannot decode a string into int`, 0},
		{`{"num_system_reserved": 1.5}`, `cannot decode the number 1.5 into int`, 0},
		{`{"num_system_reserved": 99999999999999999999}`, `cannot decode the number`, 0},
		{`{"items": [{"name": 1}]}`, `field "items[0].name": cannot decode the number 1 into string`, 0},
		{`[1]`, "cannot decode an array", 0},
		{`null`, "", 0},
		{`{"num_system_reserved": null, "list": null, "inner": null}`, "", 0},
		{`{"num_sys`, "unexpected end of JSON input", 0},
		{`{"num_system_re\u0073erved": 7}`, "", 7}, // escapes decode to the exact name
	}
	for _, tt := range tests {
		var a strictArgs
		err := DecodeStrict([]byte(tt.in), &a)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.in, err)
		case tt.err == "" && a.Reserved != tt.want:
			t.Errorf("%s: reserved %d", tt.in, a.Reserved)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: err = %v, want %q", tt.in, err, tt.err)
		}
	}
	// A map takes any names, but each once.
	var m map[string]json.RawMessage
	if err := DecodeStrict([]byte(`{"a":1,"A":2}`), &m); err != nil {
		t.Fatal(err)
	}
	if err := DecodeStrict([]byte(`{"a":1,"a":2}`), &m); err == nil {
		t.Fatal("duplicate accepted in a map")
	}
}

// FuzzDecodeStrict: DecodeStrict refuses what decodeStrictJSON (the same
// rules on encoding/json) refuses; whatever it accepts, encoding/json
// decodes to the same value, and every member name of the object is
// exactly one of the struct's names, given once.
func FuzzDecodeStrict(f *testing.F) {
	f.Add(`{"num_system_reserved": 12, "pattern": "ttyS"}`)
	f.Add(`{"num_system_reserved": 12, "NUM_SYSTEM_RESERVED": 0}`)
	f.Add(`{"inner": {"plugin": "drm", "args": {"x": 1}}, "items": [{"name": "a"}]}`)
	f.Add(`{"list": ["a"], "list": ["b"]}`)
	f.Add(`{"small": 127, "count": 65535, "ratio": 1e38, "on": true, "flag": false, "ints": [1, -2, null]}`)
	f.Add(`{"raw": {"a": [1]}, "map": {"x": null, "X": "y"}, "Untagged": "u", "untagged": "v"}`)
	f.Add(`{"small": 128, "count": -1, "ratio": 1e39, "on": null, "inner": {"args": null}}`)
	f.Add(`null`)
	names := map[string]bool{"num_system_reserved": true, "pattern": true, "list": true, "inner": true, "items": true,
		"small": true, "count": true, "ratio": true, "on": true, "flag": true, "ints": true, "raw": true, "map": true, "Untagged": true}
	f.Fuzz(func(t *testing.T, in string) {
		var a, ref strictArgs
		err := DecodeStrict([]byte(in), &a)
		refErr := decodeStrictJSON([]byte(in), &ref)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("DecodeStrict(%q) = %v; on encoding/json: %v", in, err, refErr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(a, ref) {
			t.Fatalf("DecodeStrict(%q) = %+v; on encoding/json: %+v", in, a, ref)
		}
		if strings.TrimSpace(in) == "null" {
			return
		}
		var b strictArgs
		if err := json.Unmarshal([]byte(in), &b); err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("encoding/json disagrees: %v\n%+v\n%+v", err, a, b)
		}
		// An independent count of the members: one Decode into a map
		// per member, through a token stream.
		dec := json.NewDecoder(strings.NewReader(in))
		if tok, _ := dec.Token(); tok != json.Delim('{') {
			t.Fatalf("accepted a non-object: %q", in)
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, _ := dec.Token()
			k := tok.(string)
			if !names[k] || seen[k] {
				t.Fatalf("accepted member %q in %q", k, in)
			}
			seen[k] = true
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				t.Fatal(err)
			}
		}
	})
}
