package nearmiss

import "testing"

func TestDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"args", "args", 0},
		{"arg", "args", 1},
		{"args", "", 4},
		{"CDI_COMAND", "CDI_COMMAND", 1},
		{"CDI_REQUESTID", "CDI_REQUEST_ID", 1},
		{"kitten", "sitting", 3},
		{"name", "type", 3},
	} {
		if got := Distance(tt.a, tt.b); got != tt.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := Distance(tt.b, tt.a); got != tt.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestClosest(t *testing.T) {
	known := []string{"cdiVersion", "name", "type", "plugin", "args"}
	for _, tt := range []struct {
		name, want string
		ok         bool
	}{
		{"arg", "args", true},
		{"plugins", "plugin", true},
		{"cdiversion", "cdiVersion", true},
		{"args", "", false}, // itself is no near miss
		{"capabilities", "", false},
		{"tpye", "type", true},
	} {
		got, ok := Closest(tt.name, known)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Closest(%q) = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzDistance(f *testing.F) {
	f.Add("args", "arg")
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(a) > 64 || len(b) > 64 {
			return
		}
		d := Distance(a, b)
		if d < 0 || d > max(len(a), len(b)) || (d == 0) != (a == b) || d != Distance(b, a) {
			t.Fatalf("Distance(%q, %q) = %d", a, b, d)
		}
	})
}
