package skel

import (
	"errors"
	"testing"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// Every plugin's args errors are code 101 naming the member at fault by
// its path below args, once.
func TestArgsError(t *testing.T) {
	type args struct {
		Rules []struct {
			Shares int `json:"shares"`
		} `json:"rules"`
		NUMA string `json:"numa_policy"`
	}
	decode := func(s string) error { var a args; return rawjson.DecodeStrict([]byte(s), &a) }
	_, specErr := cdispec.FromArgs([]byte(`{"cdi_spec":{"kind":"example.com/x","dirr":"/x"}}`))
	for _, tt := range []struct {
		name    string
		err     error
		code    int
		details string
	}{
		{"top", decode(`{"numa_polcy":"strict"}`), 101, `args.numa_polcy: unknown field "numa_polcy"; did you mean "numa_policy"?`},
		{"nested", decode(`{"rules":[{"share":2}]}`), 101, `args.rules[0].share: unknown field "share"; did you mean "shares"?`},
		{"case", decode(`{"Rules":[]}`), 101, `args.Rules: field "Rules" is not "rules": names are case-sensitive`},
		{"twice", decode(`{"rules":[{"shares":1,"shares":2}]}`), 101, `args.rules[0].shares: field "shares" is given twice`},
		{"type", decode(`{"rules":[{"shares":"2"}]}`), 101, `args.rules[0].shares: cannot decode a string into int`},
		{"cdi_spec", specErr, 101, `args.cdi_spec.dirr: unknown field "dirr"; did you mean "dir"?`},
		{"not about a member", errors.New("no GPUs configured"), 101, "args: no GPUs configured"},
		{"the plugin's own", protocol.NewError(protocol.CodeSetup, "x"), protocol.CodeSetup, "x"},
	} {
		var e *protocol.Error
		if err := ArgsError(tt.err); !errors.As(err, &e) || e.Code != tt.code || e.Details != tt.details {
			t.Errorf("%s: ArgsError(%v) = %v, want code %d %q", tt.name, tt.err, err, tt.code, tt.details)
		}
	}
}
