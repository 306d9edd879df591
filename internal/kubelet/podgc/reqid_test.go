package podgc

import (
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/request"
)

func TestDevicePlugin(t *testing.T) {
	a := RequestID("cdi-exec.io/tty", "tty", []string{"tty48", "tty17"})
	tests := []struct {
		name string
		id   string
		same bool
	}{
		{"order of the ids does not matter", RequestID("cdi-exec.io/tty", "tty", []string{"tty17", "tty48"}), true},
		{"other set", RequestID("cdi-exec.io/tty", "tty", []string{"tty17", "tty49"}), false},
		{"subset", RequestID("cdi-exec.io/tty", "tty", []string{"tty17"}), false},
		{"other resource", RequestID("example.com/tty", "tty", []string{"tty17", "tty48"}), false},
		{"no ambiguity in joining", RequestID("cdi-exec.io/tty", "tty", []string{"tty17tty48"}), false},
	}
	for _, tt := range tests {
		if (tt.id == a) != tt.same {
			t.Errorf("%s: %q vs %q", tt.name, tt.id, a)
		}
	}
	if !strings.HasPrefix(a, "k8s-dp-tty-") {
		t.Errorf("id %q lacks its prefix", a)
	}
}

func TestValidUnderGrammar(t *testing.T) {
	long := strings.Repeat("T", request.MaxTypeLen)
	for _, typ := range []string{"tty", "gpu", long} {
		id := RequestID("cdi-exec.io/"+typ, typ, []string{"0000:03:00.0", "x_y"})
		if err := request.ValidRequestID(id); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
		if caller.CheckOwnID(id) == nil {
			t.Errorf("%s: %q is not in the reserved namespace", typ, id)
		}
		if !Made(id, typ) {
			t.Errorf("Made(%q, %q) = false", id, typ)
		}
	}
}

func TestMade(t *testing.T) {
	id := RequestID("cdi-exec.io/tty", "tty", []string{"tty13"})
	tests := []struct {
		id, typ string
		want    bool
	}{
		{id, "tty", true},
		{id, "gpu", false},
		{id + "0", "tty", false},
		{id[:len(id)-1], "tty", false},
		{strings.ToUpper(id[:len(id)-1]) + "A", "tty", false},
		{"k8s-dp-tty-" + strings.Repeat("g", 32), "tty", false},
		{"k8s-dra-0b9f3e3c-1111-2222-3333-444455556666", "tty", false},
		{"pod-a", "tty", false},
	}
	for _, tt := range tests {
		if got := Made(tt.id, tt.typ); got != tt.want {
			t.Errorf("Made(%q, %q) = %v", tt.id, tt.typ, got)
		}
	}
}
