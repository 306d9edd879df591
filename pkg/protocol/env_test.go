package protocol

import (
	"testing"
	"time"
)

func TestParseTimeout(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration // 0: an error
	}{
		{"10", 10 * time.Second},
		{"0.5", 500 * time.Millisecond},
		{"500ms", 500 * time.Millisecond},
		{"2m", 2 * time.Minute},
		{"0", 0},
		{"-1s", 0},
		{"86401", 0},
		{"soon", 0},
		{"", 0},
	}
	for _, tt := range tests {
		got, err := ParseTimeout(tt.in)
		if (err == nil) != (tt.want != 0) || got != tt.want {
			t.Errorf("ParseTimeout(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestReadEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Env
		warn bool
	}{
		{"defaults", nil, Env{"/", "/var/lib/cdi", "/opt/cdi/bin", "/etc/cdi", 10 * time.Second}, false},
		{"empty is unset", map[string]string{EnvHostRoot: "", EnvLockTimeout: ""},
			Env{"/", "/var/lib/cdi", "/opt/cdi/bin", "/etc/cdi", 10 * time.Second}, false},
		{"overrides", map[string]string{EnvHostRoot: "/h", EnvStateDir: "/s", EnvPath: "/p", EnvConfDir: "/c", EnvLockTimeout: "1.5"},
			Env{"/h", "/s", "/p", "/c", 1500 * time.Millisecond}, false},
		{"bad lock timeout keeps the default", map[string]string{EnvLockTimeout: "soon"},
			Env{"/", "/var/lib/cdi", "/opt/cdi/bin", "/etc/cdi", 10 * time.Second}, true},
	}
	for _, tt := range tests {
		got, err := ReadEnv(func(k string) string { return tt.env[k] })
		if got != tt.want || (err != nil) != tt.warn {
			t.Errorf("%s: ReadEnv = %+v, %v; want %+v, warning %v", tt.name, got, err, tt.want, tt.warn)
		}
	}
}
