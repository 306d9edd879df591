package caller

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		raw string
		ok  bool
	}{
		{`{"cdiVersion":"0.0.1","name":"n","type":"gpu","plugin":"drm"}`, true},
		{`{"cdiVersion":"0.0.1","name":"n","type":"tty","plugin":"drm"}`, false},
		{`{"cdiVersion":"0.0.1","name":"n","type":"gpu","plugin":"../drm"}`, false},
		{`{"cdiVersion":"0.0.1","name":"n","type":"gpu","plugin":""}`, false},
		{`{"cdiVersion":"0.0.1","type":"gpu","plugin":"drm"}`, false},
		{`{"cdiVersion":"0.0.1","name":"n","type":"gpu","plugin":7}`, false},
		{`[`, false},
	}
	for _, tt := range tests {
		_, err := parseConfig("f.conf", []byte(tt.raw), "gpu")
		if (err == nil) != tt.ok {
			t.Errorf("%s: %v", tt.raw, err)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add(`{"cdiVersion":"0.0.1","name":"n","type":"gpu","plugin":"drm"}`, "gpu")
	f.Fuzz(func(t *testing.T, raw, folder string) {
		c, err := parseConfig("f.conf", []byte(raw), folder)
		if err != nil {
			return
		}
		if c.Type != folder || c.Plugin == "" || strings.Contains(c.Plugin, "/") {
			t.Fatalf("accepted %+v for folder %q", c, folder)
		}
	})
}

// plan puts replays first and the one type whose plugins held something
// under the id last, and refuses two such types.
func TestPlan(t *testing.T) {
	conf := func(typ, plugin, args string) Config {
		return Config{Type: typ, Plugin: plugin, Raw: []byte(`{"type":"` + typ + `","plugin":"` + plugin + `","args":` + args + `}`)}
	}
	confs := []Config{
		conf("tty", "generic-tty", `{}`),
		conf("gpu", "drm", `{}`),
		conf("vgpu", "sriov", `{"delegate":{"plugin":"drm","args":{}}}`),
		conf("serial", "generic-tty2", `{}`),
	}
	ttyHeld := Holding{Plugin: "generic-tty", Type: "tty", Amounts: map[string]int{"tty": 1}}
	gpuHeld := Holding{Plugin: "drm", Type: "gpu", Amounts: map[string]int{"gpu": 1}}
	tests := []struct {
		name    string
		request string
		held    []Holding
		order   []string
		replay  []string
		err     string
	}{
		{"fresh id", "tty:1,gpu:1,vgpu:99", nil, []string{"tty", "gpu", "vgpu"}, nil, ""},
		{"replays first, the delegate's plugin held gpu", "vgpu:99,tty:1,gpu:1", []Holding{ttyHeld, gpuHeld}, []string{"tty", "gpu", "vgpu"}, []string{"tty", "gpu"}, ""},
		{"a new amount is no replay", "tty:2,serial:1", []Holding{ttyHeld}, []string{"serial", "tty"}, nil, ""},
		{"two touched types", "tty:2,gpu:2", []Holding{ttyHeld, gpuHeld}, nil, nil, "already holds something in the plugins of more than one new type"},
		{"an unreadable store may hold anything", "tty:1,gpu:1", []Holding{{Plugin: "generic-tty", Unknown: errors.New("x")}}, []string{"gpu", "tty"}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := request.Parse(tt.request)
			if err != nil {
				t.Fatal(err)
			}
			var types []string
			byType := map[string][]request.Item{}
			for _, it := range req.Items {
				types = append(types, it.Spec.Type)
				byType[it.Spec.Type] = append(byType[it.Spec.Type], it)
			}
			order, replay, err := plan(confs, "pod-a", types, byType, tt.held)
			if tt.err != "" {
				var pe *protocol.Error
				if !errors.As(err, &pe) || pe.Code != protocol.CodeConflict || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want code 104 with %q", err, tt.err)
				}
				return
			}
			var replays []string
			for _, typ := range order {
				if replay[typ] {
					replays = append(replays, typ)
				}
			}
			if err != nil || !slices.Equal(order, tt.order) || !slices.Equal(replays, tt.replay) {
				t.Fatalf("order %v replays %v %v; want %v %v", order, replays, err, tt.order, tt.replay)
			}
		})
	}
}

func TestReaches(t *testing.T) {
	c := Config{Plugin: "sriov", Raw: []byte(`{"args":{"delegate":{"plugin":"a","args":{"delegate":{"plugin":"b"}}}}}`)}
	if got := c.Reaches(); !slices.Equal(got, []string{"sriov", "a", "b"}) {
		t.Fatalf("Reaches: %v", got)
	}
}

// A config that cannot be used is placed at its fault: a syntax error's
// offset or the value of the member at fault, as line and column.
func TestProblemPlace(t *testing.T) {
	for _, tt := range []struct {
		raw       string
		line, col int
	}{
		{"{\n  // comment\n}", 2, 3},
		{`{"cdiVersion":"0.0.1","name":"n","type":"gpu","plugin":7}`, 1, 56},
		{"{\"cdiVersion\":\"0.0.1\",\n\"name\":\"n\",\n\"type\":\"gpu\",\n\"plugin\":\"drm\",\n\"args\":[]}", 5, 8},
		{`{"cdiVersion":"0.0.1","type":"gpu","plugin":"drm"}`, 0, 0}, // a missing field has no place
	} {
		_, err := parseConfig("f.conf", []byte(tt.raw), "gpu")
		if err == nil {
			t.Fatalf("%q: no error", tt.raw)
		}
		if p := problem("f.conf", []byte(tt.raw), err); p.Line != tt.line || p.Col != tt.col {
			t.Errorf("%q: %v at %d:%d, want %d:%d", tt.raw, err, p.Line, p.Col, tt.line, tt.col)
		}
	}
}

func FuzzProblemPlace(f *testing.F) {
	f.Add("{\n  // comment\n}")
	f.Add(`{"cdiVersion":"0.0.1","name":"n","type":"gpu","plugin":7}`)
	f.Fuzz(func(t *testing.T, raw string) {
		_, err := parseConfig("f.conf", []byte(raw), "gpu")
		if err == nil {
			return
		}
		p := problem("f.conf", []byte(raw), err)
		if p.Line < 0 || p.Line > strings.Count(raw, "\n")+1 || (p.Line == 0) != (p.Col == 0) || p.Col > len(raw)+1 {
			t.Fatalf("%q: %v at %d:%d", raw, err, p.Line, p.Col)
		}
	})
}
