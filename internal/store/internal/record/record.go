// Package record is the form of a store record: the record types, and
// their JSON codec, written and read by hand (see Marshal).
package record

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/request"
)

// Device is one device held by a request.
type Device struct {
	Key   string   `json:"key"`   // stable identity, for example a PCI address
	Nodes []string `json:"nodes"` // host device node paths handed out
	NUMA  int      `json:"numa"`  // NUMA node, -1 when unknown
}

// Allocation is what one resource-spec of a request holds.
type Allocation struct {
	Spec    string    `json:"spec"`
	Amount  int       `json:"amount"`
	Devices []Device  `json:"devices"`
	Created time.Time `json:"created"`
	// Nodes, when set, is the node list handed out for the whole
	// allocation, for plugins whose nodes do not belong to single devices
	// (a delegate's answer, a shared /dev/vfio/vfio).
	Nodes []string `json:"nodes,omitempty"`
	// Delegate names the plugin chain-loaded for this allocation.
	Delegate string `json:"delegate,omitempty"`
}

// Type returns the resource type of the allocation: the type of its
// spec, which is the type of the config that made it (a plugin refuses a
// spec of another type than its config's). It is the allocation's own,
// where the record's Type is only that of the id's first ADD in the
// plugin: a plugin serving several types (generic's kvm, fuse and tun)
// keeps them in one record, and a delegate (drm for sriov's vgpu) keeps
// its delegating plugin's allocations beside its own.
func (a *Allocation) Type() string {
	s, err := request.ParseSpec(a.Spec)
	if err != nil { // not written by a plugin of this suite
		return a.Spec
	}
	return s.Type
}

// HandedOut returns the node paths the allocation handed out.
func (a *Allocation) HandedOut() []string {
	if a.Nodes != nil {
		return a.Nodes
	}
	var out []string
	for _, d := range a.Devices {
		for _, n := range d.Nodes {
			// Shares of one device (pool.Unit) bring the same nodes:
			// each is handed out once.
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// Record is everything one request-id holds in one plugin.
type Record struct {
	ID string `json:"id"`
	// Type is the resource type of the id's first ADD in the plugin. The
	// record may hold allocations of other types as well: each
	// allocation's own is its Type.
	Type        string       `json:"type"`
	Allocations []Allocation `json:"allocations"`
	// Owner is who made the record: the CDI_REQUEST_OWNER of its first
	// ADD ("kubernetes" for the Kubernetes modes); empty when the caller
	// named none, and in records written before owners were kept.
	Owner string `json:"owner,omitempty"`
}

// Find returns the allocation for spec, or nil.
func (r *Record) Find(spec string) *Allocation {
	for i := range r.Allocations {
		if r.Allocations[i].Spec == spec {
			return &r.Allocations[i]
		}
	}
	return nil
}

// Devices returns every device of the record, allocation by allocation.
func (r *Record) Devices() []Device {
	var ds []Device
	for _, a := range r.Allocations {
		ds = append(ds, a.Devices...)
	}
	return ds
}

// A record is kept as the JSON that encoding/json makes of it. Records are
// written and read by hand here, because the first use of encoding/json in
// a process costs more (reflection over the types, about 0.1 ms) than the
// whole transaction around it: Marshal writes exactly the bytes
// json.Marshal writes, and Unmarshal reads exactly that form
// directly, leaving anything else (escaped strings, other spacing or
// order, records written by older versions) to json.Unmarshal. Both are
// fuzzed against encoding/json (record_test.go).

// Marshal is json.Marshal(r).
func Marshal(r *Record) ([]byte, error) {
	for _, a := range r.Allocations {
		if _, err := a.Created.MarshalJSON(); err != nil {
			return json.Marshal(r) // for encoding/json's own error
		}
	}
	b := make([]byte, 0, 256)
	b = append(b, `{"id":`...)
	b = rawjson.AppendString(b, r.ID)
	b = append(b, `,"type":`...)
	b = rawjson.AppendString(b, r.Type)
	b = append(b, `,"allocations":`...)
	b = appendList(b, r.Allocations, appendAllocation)
	if r.Owner != "" {
		b = append(b, `,"owner":`...)
		b = rawjson.AppendString(b, r.Owner)
	}
	return append(b, '}'), nil
}

func appendAllocation(b []byte, a Allocation) []byte {
	b = append(b, `{"spec":`...)
	b = rawjson.AppendString(b, a.Spec)
	b = append(b, `,"amount":`...)
	b = strconv.AppendInt(b, int64(a.Amount), 10)
	b = append(b, `,"devices":`...)
	b = appendList(b, a.Devices, func(b []byte, d Device) []byte {
		b = append(b, `{"key":`...)
		b = rawjson.AppendString(b, d.Key)
		b = append(b, `,"nodes":`...)
		b = appendList(b, d.Nodes, rawjson.AppendString)
		b = append(b, `,"numa":`...)
		b = strconv.AppendInt(b, int64(d.NUMA), 10)
		return append(b, '}')
	})
	created, _ := a.Created.MarshalJSON() // checked by Marshal
	b = append(b, `,"created":`...)
	b = append(b, created...)
	if len(a.Nodes) > 0 {
		b = append(b, `,"nodes":`...)
		b = appendList(b, a.Nodes, rawjson.AppendString)
	}
	if a.Delegate != "" {
		b = append(b, `,"delegate":`...)
		b = rawjson.AppendString(b, a.Delegate)
	}
	return append(b, '}')
}

// appendList writes a list as encoding/json does: null for nil.
func appendList[T any](b []byte, list []T, elem func([]byte, T) []byte) []byte {
	if list == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, v := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = elem(b, v)
	}
	return append(b, ']')
}

// Unmarshal is json.Unmarshal(b, r) for a fresh r.
func Unmarshal(b []byte, r *Record) error {
	p := parser{b: b}
	if p.record(r) && p.ok && len(p.b) == 0 {
		return nil
	}
	*r = Record{}
	return json.Unmarshal(b, r)
}

// parser reads the exact form Marshal writes; ok turns false at the
// first byte it does not expect.
type parser struct {
	b  []byte
	ok bool
}

func (p *parser) lit(s string) bool {
	if !p.ok || len(p.b) < len(s) || string(p.b[:len(s)]) != s {
		p.ok = false
		return false
	}
	p.b = p.b[len(s):]
	return true
}

func (p *parser) record(r *Record) bool {
	p.ok = true
	if !(p.lit(`{"id":`) && p.str(&r.ID) && p.lit(`,"type":`) && p.str(&r.Type) &&
		p.lit(`,"allocations":`) && list(p, &r.Allocations, p.allocation)) {
		return false
	}
	if len(p.b) > 0 && string(p.b[:min(len(p.b), 9)]) == `,"owner":` {
		if !(p.lit(`,"owner":`) && p.str(&r.Owner)) || r.Owner == "" {
			p.ok = false
			return false
		}
	}
	return p.lit(`}`)
}

func (p *parser) allocation(a *Allocation) bool {
	if !(p.lit(`{"spec":`) && p.str(&a.Spec) && p.lit(`,"amount":`) && p.int(&a.Amount) &&
		p.lit(`,"devices":`) && list(p, &a.Devices, p.device) && p.lit(`,"created":`)) {
		return false
	}
	end := p.quoted()
	if end < 0 || a.Created.UnmarshalJSON(p.b[:end]) != nil {
		p.ok = false
		return false
	}
	p.b = p.b[end:]
	if len(p.b) > 0 && string(p.b[:min(len(p.b), 9)]) == `,"nodes":` {
		if !(p.lit(`,"nodes":`) && list(p, &a.Nodes, p.str)) || len(a.Nodes) == 0 {
			p.ok = false
			return false
		}
	}
	if len(p.b) > 0 && string(p.b[:min(len(p.b), 12)]) == `,"delegate":` {
		if !(p.lit(`,"delegate":`) && p.str(&a.Delegate)) || a.Delegate == "" {
			p.ok = false
			return false
		}
	}
	return p.lit(`}`)
}

func (p *parser) device(d *Device) bool {
	return p.lit(`{"key":`) && p.str(&d.Key) && p.lit(`,"nodes":`) && list(p, &d.Nodes, p.str) &&
		p.lit(`,"numa":`) && p.int(&d.NUMA) && p.lit(`}`)
}

// list reads null (nil) or a list ([] is empty, not nil).
func list[T any](p *parser, dst *[]T, elem func(*T) bool) bool {
	if len(p.b) >= 4 && string(p.b[:4]) == "null" {
		p.b = p.b[4:]
		return true
	}
	if !p.lit(`[`) {
		return false
	}
	*dst = []T{}
	for i := 0; len(p.b) > 0 && p.b[0] != ']'; i++ {
		if i > 0 && !p.lit(`,`) {
			return false
		}
		var v T
		if !elem(&v) {
			return false
		}
		*dst = append(*dst, v)
	}
	return p.lit(`]`)
}

// quoted returns the length of the string at the front, quotes included,
// when it needs no unescaping and is valid UTF-8; else -1.
func (p *parser) quoted() int {
	if len(p.b) == 0 || p.b[0] != '"' {
		return -1
	}
	for i := 1; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			if !utf8.Valid(p.b[1:i]) {
				return -1
			}
			return i + 1
		case c == '\\' || c < ' ':
			return -1
		}
	}
	return -1
}

func (p *parser) str(s *string) bool {
	end := p.quoted()
	if end < 0 {
		p.ok = false
		return false
	}
	*s = string(p.b[1 : end-1])
	p.b = p.b[end:]
	return true
}

// int reads an integer in JSON's form (no leading zeros, no fraction or
// exponent) that fits an int.
func (p *parser) int(n *int) bool {
	i := 0
	if i < len(p.b) && p.b[i] == '-' {
		i++
	}
	start := i
	for i < len(p.b) && p.b[i] >= '0' && p.b[i] <= '9' {
		i++
	}
	if i == start || p.b[start] == '0' && i > start+1 || i < len(p.b) && (p.b[i] == '.' || p.b[i] == 'e' || p.b[i] == 'E') {
		p.ok = false
		return false
	}
	v, err := strconv.Atoi(string(p.b[:i]))
	if err != nil {
		p.ok = false
		return false
	}
	*n = v
	p.b = p.b[i:]
	return true
}
