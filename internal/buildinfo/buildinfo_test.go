package buildinfo

import (
	"bytes"
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/cdi-exec/plugins", Version: "v0.0.0-20261122135634-43016dd9a1b2+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "43016dd9a1b2c3d4e5f60718293a4b5c6d7e8f90"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tests := []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            Info
	}{
		{"stamped wins", "v1.2.3", "aaaa", vcs, Info{Version: "v1.2.3", Commit: "aaaa", Modified: true, Go: "go1.26.8"}},
		{"stamped dirty", "v0.0.0-3-gabc-dirty", "abc", &debug.BuildInfo{GoVersion: "go1"}, Info{Version: "v0.0.0-3-gabc-dirty", Commit: "abc", Modified: true, Go: "go1"}},
		{"fallback to toolchain", "", "", vcs, Info{Version: vcs.Main.Version, Commit: "43016dd9a1b2c3d4e5f60718293a4b5c6d7e8f90", Modified: true, Go: "go1.26.8"}},
		{"go install at a version", "", "", &debug.BuildInfo{GoVersion: "go1", Main: debug.Module{Version: "v1.0.0"}}, Info{Version: "v1.0.0", Go: "go1"}},
		{"nothing known", "", "", &debug.BuildInfo{GoVersion: "go1", Main: debug.Module{Version: "(devel)"}}, Info{Version: Devel, Go: "go1"}},
		{"no build info", "", "", nil, Info{Version: Devel}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resolve(tt.version, tt.commit, tt.bi)
			if tt.bi == nil {
				got.Go = "" // runtime.Version() of the test binary
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	tests := []struct {
		info Info
		want string
	}{
		{Info{Version: "v1.2.3", Commit: "abc", Go: "go1.26.8"},
			"drm v1.2.3\ncommit: abc\nprotocol: 0.0.1, 0.0.2\ngo: go1.26.8\n"},
		{Info{Version: Devel, Go: "go1"},
			"drm (devel)\ncommit: unknown\nprotocol: 0.0.1, 0.0.2\ngo: go1\n"},
		{Info{Version: "v1-dirty", Commit: "abc", Modified: true, Go: "go1"},
			"drm v1-dirty\ncommit: abc (modified)\nprotocol: 0.0.1, 0.0.2\ngo: go1\n"},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		tt.info.Write(&b, "drm", []string{"0.0.1", "0.0.2"})
		if b.String() != tt.want {
			t.Errorf("got %q, want %q", b.String(), tt.want)
		}
	}
}

func TestPrintIfAsked(t *testing.T) {
	for _, args := range [][]string{nil, {"-version"}, {"--version", "x"}, {"version"}, {"--help"}} {
		var b bytes.Buffer
		if PrintIfAsked(args, &b, "drm", nil) || b.Len() != 0 {
			t.Errorf("%q: handled as --version", args)
		}
	}
	var b bytes.Buffer
	if !PrintIfAsked([]string{"--version"}, &b, "drm", []string{"0.0.2"}) || !bytes.HasPrefix(b.Bytes(), []byte("drm ")) {
		t.Errorf("--version: %q", b.String())
	}
}
