// Package jsonref is the reference the JSON decoders' tests hold them to:
// strict member checks written on encoding/json. Tests only import it.
package jsonref

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// CheckMembers walks the members of the object b; path prefixes the names
// in errors. Input that is not an object is left to the decoder to report.
func CheckMembers(b []byte, t reflect.Type, path string, unknownOK bool) error {
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
			if err := CheckMembers(raw, ft, path+name+".", false); err != nil {
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
		if err := CheckMembers(e, elem, fmt.Sprintf("%s[%d].", strings.TrimSuffix(path, "."), i), unknownOK); err != nil {
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
