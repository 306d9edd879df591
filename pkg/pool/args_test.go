package pool

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/cdi-exec/plugins/pkg/protocol"
)

func TestArgsTakesSpecOut(t *testing.T) {
	type args struct {
		List []string `json:"list"`
		Name string   `json:"n\u00e9"`
	}
	tests := []struct {
		in   string
		want args
		spec bool
		err  bool
	}{
		{`{"list":["a"]}`, args{List: []string{"a"}}, false, false},
		{`{"cdi_spec":{"kind":"example.com/gpu"},"list":["a",{"x":1}]}`, args{}, true, true},
		{`{"list":["a"],"cdi_spec":{"kind":"example.com/gpu","dir":"/run/x"},"n\u00e9":"<&>"}`, args{List: []string{"a"}, Name: "<&>"}, true, false},
		{`{"cdi_spec":{"kind":"example.com/gpu"}}`, args{}, true, false},
		{`{"cdi_spec":{"kind":"nope"}}`, args{}, false, true},
		{`{"cdi_spec":{"kind":"example.com/gpu"},"other":1}`, args{}, true, true},
	}
	for _, tt := range tests {
		var got args
		spec, err := Args(protocol.Config{Args: json.RawMessage(tt.in)}, &got)
		switch {
		case (err != nil) != tt.err:
			t.Errorf("%s: error %v, want error=%v", tt.in, err, tt.err)
		case err == nil && (spec != nil) != tt.spec:
			t.Errorf("%s: spec %+v, want one=%v", tt.in, spec, tt.spec)
		case err == nil && !reflect.DeepEqual(got, tt.want):
			t.Errorf("%s: args %+v, want %+v", tt.in, got, tt.want)
		}
	}
}
