package rawjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/cdi-exec/plugins/internal/nearmiss"
)

// DecodeStrict decodes the JSON object b into dst, a pointer to a struct or
// a map, with member names matched exactly.
//
// encoding/json matches names case-insensitively, even with
// DisallowUnknownFields, and lets a repeated member silently replace the
// first: {"num_system_reserved": 12, "NUM_SYSTEM_RESERVED": 0} would reserve
// nothing. Here a name that is not exactly a field's json name, and a name
// given twice, are errors that name the member, at every depth;
// json.RawMessage members are kept as they are, for their own decoder.
//
// Otherwise the result is what encoding/json's Unmarshal gives, for the
// kinds plugin args use: strings, booleans, integers, floats, slices,
// pointers, structs, maps with string keys and json.RawMessage. It is
// written on internal/rawjson because plugins decode their args on every call,
// and the first use of encoding/json's reflection in a fresh process costs
// more than the rest of an INFO.
func DecodeStrict(b []byte, dst any) error {
	v, err := Value(b)
	if err != nil {
		return err
	}
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("cannot decode into %T: not a non-nil pointer", dst)
	}
	return decode(v, rv.Elem(), "")
}

var rawMessage = reflect.TypeFor[json.RawMessage]()

// decode stores the JSON value raw in v; path names the value in errors
// ("" at the top, "inner." for the members of inner).
func decode(raw []byte, v reflect.Value, path string) error {
	switch {
	case v.Type() == rawMessage:
		v.SetBytes(bytes.Clone(raw))
		return nil
	case raw[0] == 'n':
		// null empties what can be nil and leaves the rest alone.
		switch v.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
			v.SetZero()
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return decode(raw, v.Elem(), path)
	case reflect.Struct:
		return decodeStruct(raw, v, path)
	case reflect.Map:
		return decodeMap(raw, v, path)
	case reflect.Slice:
		return decodeSlice(raw, v, path)
	}
	return decodeScalar(raw, v, path)
}

// decodeScalar stores a string, boolean or number.
func decodeScalar(raw []byte, v reflect.Value, path string) error {
	switch k := v.Kind(); {
	case k == reflect.String && raw[0] == '"':
		s, err := String(raw)
		v.SetString(s)
		return err
	case k == reflect.Bool && (raw[0] == 't' || raw[0] == 'f'):
		v.SetBool(raw[0] == 't')
		return nil
	case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9'):
	case k >= reflect.Int && k <= reflect.Int64:
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || v.OverflowInt(n) {
			return mismatch(raw, v, path)
		}
		v.SetInt(n)
		return nil
	case k >= reflect.Uint && k <= reflect.Uintptr:
		n, err := strconv.ParseUint(string(raw), 10, 64)
		if err != nil || v.OverflowUint(n) {
			return mismatch(raw, v, path)
		}
		v.SetUint(n)
		return nil
	case k == reflect.Float32 || k == reflect.Float64:
		f, err := strconv.ParseFloat(string(raw), v.Type().Bits())
		if err != nil || v.OverflowFloat(f) {
			return mismatch(raw, v, path)
		}
		v.SetFloat(f)
		return nil
	}
	return mismatch(raw, v, path)
}

// mismatch is the error for a JSON value that v cannot hold.
func mismatch(raw []byte, v reflect.Value, path string) error {
	what := map[byte]string{'"': "a string", '{': "an object", '[': "an array", 't': "a boolean", 'f': "a boolean"}[raw[0]]
	if what == "" {
		what = "the number " + string(raw)
	}
	name := strings.TrimSuffix(path, ".")
	if name == "" {
		return fmt.Errorf("cannot decode %s into %s", what, v.Type())
	}
	return &MemberError{Name: name, Err: fmt.Errorf("field %q: cannot decode %s into %s", name, what, v.Type()),
		At: fmt.Errorf("cannot decode %s into %s", what, v.Type())}
}

// UniqueMembers calls fn for each member of the object raw, as rawjson.Members
// does, and refuses a member given twice; path prefixes its name in the
// error.
func UniqueMembers(raw []byte, path string, fn func(name string, value []byte) error) error {
	seen := make(map[string]bool, 8)
	return Members(raw, func(name string, value []byte) error {
		if seen[name] {
			return memberError(path, name, func(p string) error { return fmt.Errorf("field %q is given twice", p+name) })
		}
		seen[name] = true
		return fn(name, value)
	})
}

// decodeStruct stores an object's members in the fields of v whose json
// names they are, exactly.
func decodeStruct(raw []byte, v reflect.Value, path string) error {
	if raw[0] != '{' {
		return mismatch(raw, v, path)
	}
	return UniqueMembers(raw, path, func(name string, value []byte) error {
		i, err := fieldIndex(v.Type(), name, path)
		if err != nil {
			return err
		}
		return decode(value, v.Field(i), path+name+".")
	})
}

// fieldIndex finds the field of struct t whose json name is name.
func fieldIndex(t reflect.Type, name, path string) (int, error) {
	near := ""
	var tags []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || tag == "-" {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if tag == name {
			return i, nil
		}
		tags = append(tags, tag)
		if strings.EqualFold(tag, name) {
			near = tag
		}
	}
	if near != "" {
		return 0, memberError(path, name, func(p string) error { return CaseError(p, name, near) })
	}
	if near, ok := nearmiss.Closest(name, tags); ok {
		return 0, memberError(path, name, func(p string) error { return fmt.Errorf("unknown field %q; did you mean %q?", p+name, p+near) })
	}
	return 0, memberError(path, name, func(p string) error { return fmt.Errorf("unknown field %q", p+name) })
}

// CaseError is the error for a member name that is a field's name only
// when case is ignored.
func CaseError(path, name, field string) error {
	return fmt.Errorf("field %q is not %q: names are case-sensitive", path+name, path+field)
}

// decodeMap adds an object's members to the map v, whose keys are strings.
func decodeMap(raw []byte, v reflect.Value, path string) error {
	if raw[0] != '{' || v.Type().Key().Kind() != reflect.String {
		return mismatch(raw, v, path)
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	return UniqueMembers(raw, path, func(name string, value []byte) error {
		elem := reflect.New(v.Type().Elem()).Elem()
		if err := decode(value, elem, path+name+"."); err != nil {
			return err
		}
		v.SetMapIndex(reflect.ValueOf(name).Convert(v.Type().Key()), elem)
		return nil
	})
}

// decodeSlice replaces v with a new slice of an array's elements; [] is an
// empty slice, not nil.
func decodeSlice(raw []byte, v reflect.Value, path string) error {
	if raw[0] != '[' {
		return mismatch(raw, v, path)
	}
	s := reflect.MakeSlice(v.Type(), 0, 0)
	prefix := strings.TrimSuffix(path, ".")
	err := Elements(raw, func(value []byte) error {
		i := s.Len()
		s = reflect.Append(s, reflect.Zero(v.Type().Elem()))
		return decode(value, s.Index(i), fmt.Sprintf("%s[%d].", prefix, i))
	})
	v.Set(s)
	return err
}

// MemberError is an error about one member of a JSON object, which it
// names, so that a caller can point at it in the file.
type MemberError struct {
	Name string // the member's name as given; a dotted path below the top
	// Err says what is wrong, naming the member by its path
	// (`unknown field "rules[0].share"`).
	Err error
	// At says it where the member is already named, by a message that
	// leads with its path or by a place in the file (`unknown field
	// "share"`); nil when Err says it so.
	At error
}

func (e *MemberError) Error() string { return e.Err.Error() }
func (e *MemberError) Unwrap() error { return e.Err }

// Here is the error said at the member (At, else Err): what follows
// the member's path in "args.rules[0].share: unknown field "share"".
func (e *MemberError) Here() error {
	if e.At != nil {
		return e.At
	}
	return e.Err
}

// Below returns the error about the same member of an object that is
// member outer of another ("cdi_spec"): its path then starts there.
func (e *MemberError) Below(outer string) *MemberError {
	return &MemberError{Name: outer + "." + e.Name, Err: fmt.Errorf("%s: %w", outer, e.Err), At: e.Here()}
}

// memberError is the error about member name of the object at path
// ("" at the top, "inner." below inner); msg words it, naming the member
// with a prefix: its path for Err, none for At.
func memberError(path, name string, msg func(prefix string) error) *MemberError {
	return &MemberError{Name: path + name, Err: msg(path), At: msg("")}
}
