package rawjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"

	"github.com/cdi-exec/plugins/internal/rawjson/jsonref"
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
	if err := jsonref.CheckMembers(b, reflect.TypeOf(dst), "", false); err != nil {
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
