package rawjson

import (
	"strconv"
	"strings"
)

// Locate returns the byte offset in doc, one JSON value, of the value a
// member path names: member names joined by ".", an array element as
// "[i]" after its member ("args.rules[1].paths[0]"), as MemberError names
// them below the top. It returns the offset of the deepest value of the
// path that exists (a member the path names but doc lacks is placed at
// its object), and -1 when doc is not JSON or not even the path's first
// member is there.
func Locate(doc []byte, path string) int {
	v, err := Value(doc)
	if err != nil {
		return -1
	}
	at := func(sub []byte) int { return cap(doc) - cap(sub) } // sub lies within doc
	found := -1
	for _, step := range pathSteps(path) {
		var next []byte
		if step.index < 0 {
			_ = Members(v, func(name string, value []byte) error {
				if name == step.name {
					next = value
				}
				return nil
			})
		} else {
			i := 0
			_ = Elements(v, func(value []byte) error {
				if i == step.index {
					next = value
				}
				i++
				return nil
			})
		}
		if next == nil {
			return found
		}
		v, found = next, at(next)
	}
	return found
}

// step is one step of a member path: a member name, or an array index
// (name unused).
type step struct {
	name  string
	index int // -1 for a member
}

// pathSteps splits a member path into its steps; what does not parse as
// an index is a name.
func pathSteps(path string) []step {
	var out []step
	for part := range strings.SplitSeq(path, ".") {
		name, rest, _ := strings.Cut(part, "[")
		if name != "" {
			out = append(out, step{name: name, index: -1})
		}
		for rest != "" {
			num, after, ok := strings.Cut(rest, "]")
			i, err := strconv.Atoi(num)
			if !ok || err != nil || i < 0 {
				break
			}
			out = append(out, step{index: i})
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return out
}
