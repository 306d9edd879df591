package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// decodeStrictJSON is DecodeStrict written on encoding/json: the reference
// the tests hold DecodeStrict to. It decodes the JSON object b into dst, a pointer to a struct or
// a map, with member names matched exactly.
//
// encoding/json matches names case-insensitively, even with
// DisallowUnknownFields, and lets a repeated member silently replace the
// first: {"num_system_reserved": 12, "NUM_SYSTEM_RESERVED": 0} would reserve
// nothing. Here a name that is not exactly a field's json name, and a name
// given twice, are errors that name the member. Members whose field is a
// struct, or a pointer to or slice of structs, are checked the same way;
// json.RawMessage members are left for their own decoder.
func decodeStrictJSON(b []byte, dst any) error {
	if err := checkMembers(b, reflect.TypeOf(dst), "", false); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON object")
	}
	return nil
}

// checkMembers walks the members of the object b; path prefixes the names
// in errors. Input that is not an object is left to the decoder to report.
func checkMembers(b []byte, t reflect.Type, path string, unknownOK bool) error {
	for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice) {
		if t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8 {
			return checkElems(b, t.Elem(), path, unknownOK)
		}
		t = t.Elem()
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	fields := fieldTypes(t)
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil
		}
		if seen[name] {
			return fmt.Errorf("field %q is given twice", path+name)
		}
		seen[name] = true
		ft, known := fields[name]
		if !known && fields != nil {
			for f := range fields {
				if strings.EqualFold(f, name) {
					return fmt.Errorf("field %q is not %q: names are case-sensitive", path+name, path+f)
				}
			}
			if !unknownOK {
				return fmt.Errorf("unknown field %q", path+name)
			}
		}
		if ft != nil {
			if err := checkMembers(raw, ft, path+name+".", false); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkElems checks every element of the array b.
func checkElems(b []byte, elem reflect.Type, path string, unknownOK bool) error {
	var elems []json.RawMessage
	if json.Unmarshal(b, &elems) != nil {
		return nil
	}
	for i, e := range elems {
		if err := checkMembers(e, elem, fmt.Sprintf("%s[%d].", strings.TrimSuffix(path, "."), i), unknownOK); err != nil {
			return err
		}
	}
	return nil
}

// fieldTypes maps the json names of struct t's fields to the types that
// need checking in turn (nil for the others). It returns nil for anything
// but a struct, whose names are then all allowed (a map).
func fieldTypes(t reflect.Type) map[string]reflect.Type {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = nil
		if nested(f.Type) {
			out[name] = f.Type
		}
	}
	return out
}

// nested reports whether values of t are objects to check member by
// member.
func nested(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		if t == reflect.TypeFor[json.RawMessage]() {
			return false
		}
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && t != reflect.TypeFor[json.RawMessage]()
}
