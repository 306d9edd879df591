package caller

import (
	"strings"
	"testing"
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

func TestArgsPlace(t *testing.T) {
	raw := []byte("{\n  \"plugin\": \"generic\",\n  \"args\": {\n    \"rules\": [\n      {\"paths\": [\"/dev/kvm\", \"/dev/tty[\"]}\n    ]\n  }\n}\n")
	for _, tt := range []struct {
		details   string
		line, col int
	}{
		{`args.rules[0].paths[1]: "/dev/tty[" is not a valid glob`, 5, 30},
		{`args.rules[0]: a rule needs "paths"`, 5, 7},
		{`args: unknown field "x"`, 0, 0},
		{`no member here`, 0, 0},
		{`args.nothing: x`, 3, 11},
	} {
		if l, c := ArgsPlace(raw, tt.details); l != tt.line || c != tt.col {
			t.Errorf("ArgsPlace(%q) = %d:%d, want %d:%d", tt.details, l, c, tt.line, tt.col)
		}
	}
}
