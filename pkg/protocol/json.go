package protocol

import (
	"bytes"
	"encoding/json"
)

// Field is one member of a JSON object whose members keep their order.
type Field struct {
	Key   string
	Value any
}

// EncodeObject renders fields as one JSON object indented with two spaces,
// members in the given order, followed by a newline. The protocol wants
// cdiVersion first, which map and struct encoding cannot promise together
// with dynamic keys.
func EncodeObject(fields []Field) ([]byte, error) {
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

// NonNil returns s, or an empty slice when s is nil, so that a list is
// printed as [] rather than null.
func NonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
