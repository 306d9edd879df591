package rawjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// seeds are inputs for the table and the fuzz targets.
var seeds = []string{
	``, ` `, `{}`, `[]`, `{"a":1}`, ` {"a" : [1, 2.5e-3, -0, true, false, null, "x"]} `,
	`{"a":{"b":{"c":[]}}}`, `"\u00e9\ud83d\ude00\ud800\udc00\ud800x\udc00"`, `"\/\b\f\n\r\t\"\\"`,
	"\"a\xffb\"", "\"\xed\xa0\x80\"", `01`, `-`, `1.`, `1e`, `1e+`, `.5`, `+1`, `[1,]`, `{,}`,
	`{"a":1,}`, `{"a"}`, `{"a":1 "b":2}`, `[1 2]`, `tru`, `nul`, `"abc`, "\"a\tb\"", `"\x"`,
	`"\u12"`, `"\u12g4"`, `{"a":1}x`, `1 2`, "\ufeff{}", `{"cdiVersion":"0.0.2","args":{"k":[1,{"x":null}]}}`,
	`{"a":1,"a":2}`, "\"\\ud800\\u0041\"", "\"\\udc00\\ud800\"", `1E5`, `-0.0e-0`, `[[[[]]]]`,
}

func TestValueAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range append(seeds, strings.Repeat("[", maxDepth)+strings.Repeat("]", maxDepth),
		strings.Repeat("[", maxDepth+1)+strings.Repeat("]", maxDepth+1),
		strings.Repeat(`{"a":`, maxDepth)+"1"+strings.Repeat("}", maxDepth),
		strings.Repeat(`{"a":`, maxDepth+1)+"1"+strings.Repeat("}", maxDepth+1)) {
		checkValue(t, []byte(s))
	}
}

func FuzzValue(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkValue(t, b) })
}

// checkValue compares Value, String and Members on b with encoding/json.
func checkValue(t *testing.T, b []byte) {
	t.Helper()
	v, err := Value(b)
	if want := json.Valid(b); (err == nil) != want {
		t.Fatalf("Value(%.80q): error %v, encoding/json says valid=%v", b, err, want)
	}
	if err != nil {
		var se *SyntaxError
		if !errors.As(err, &se) || se.Offset < 0 || se.Offset > len(b) {
			t.Fatalf("Value(%.80q): error %#v is not a SyntaxError within the input", b, err)
		}
		return
	}
	if want := bytes.Trim(b, " \t\r\n"); !bytes.Equal(v, want) {
		t.Fatalf("Value(%.80q) = %.80q, want %.80q", b, v, want)
	}
	switch v[0] {
	case '"':
		checkString(t, v)
	case '{':
		checkMembers(t, v)
	case '[':
		checkElements(t, v)
	default:
		if err := Members(v, nil); !errors.Is(err, ErrNotObject) {
			t.Fatalf("Members(%.80q) = %v, want ErrNotObject", v, err)
		}
	}
}

func checkString(t *testing.T, v []byte) {
	t.Helper()
	var want string
	if err := json.Unmarshal(v, &want); err != nil {
		t.Fatal(err)
	}
	if got, err := String(v); err != nil || got != want {
		t.Fatalf("String(%q) = %q, %v; want %q", v, got, err, want)
	}
}

// checkMembers compares Members with encoding/json's tokens.
func checkMembers(t *testing.T, obj []byte) {
	t.Helper()
	type member struct {
		name  string
		value string
	}
	var got, want []member
	if err := Members(obj, func(name string, value []byte) error {
		got = append(got, member{name, string(value)})
		return nil
	}); err != nil {
		t.Fatalf("Members(%.80q): %v", obj, err)
	}
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatal(err)
		}
		want = append(want, member{tok.(string), string(raw)})
	}
	if len(got) != len(want) {
		t.Fatalf("Members(%.80q) gave %d members, encoding/json %d", obj, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("Members(%.80q) member %d = %+v, want %+v", obj, i, got[i], want[i])
		}
	}
}

func TestMembersStopsAtError(t *testing.T) {
	stop := errors.New("stop")
	var n int
	err := Members([]byte(`{"a":1,"b":2,"c":3}`), func(name string, _ []byte) error {
		n++
		if name == "b" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Errorf("Members = %v after %d calls, want stop after 2", err, n)
	}
}

func TestStringRefusesNonStrings(t *testing.T) {
	for _, s := range []string{``, `"`, `"a" `, `1`, `"a"b"`, "\"\x01\""} {
		if got, err := String([]byte(s)); err == nil {
			t.Errorf("String(%q) = %q, want an error", s, got)
		}
	}
}

// checkElements compares Elements with encoding/json.
func checkElements(t *testing.T, arr []byte) {
	t.Helper()
	var got []string
	if err := Elements(arr, func(value []byte) error {
		got = append(got, string(value))
		return nil
	}); err != nil {
		t.Fatalf("Elements(%.80q): %v", arr, err)
	}
	var want []json.RawMessage
	if err := json.Unmarshal(arr, &want); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("Elements(%.80q) gave %d elements, encoding/json %d", arr, len(got), len(want))
	}
	for i := range got {
		if got[i] != string(want[i]) {
			t.Fatalf("Elements(%.80q) element %d = %s, want %s", arr, i, got[i], want[i])
		}
	}
	if err := Elements([]byte(`{}`), nil); !errors.Is(err, ErrNotArray) {
		t.Fatalf("Elements of an object = %v", err)
	}
}
