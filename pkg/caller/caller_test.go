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
