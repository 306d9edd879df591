package skel

import (
	"slices"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/pkg/protocol"
)

// TestPinnedRequest covers what skel checks of CDI_REQUEST_DEVICES: the
// grammar, one item whose amount is the number of keys, and its place in
// the order of checks (docs/protocol.md#extension-pinned-add).
func TestPinnedRequest(t *testing.T) {
	tests := []struct {
		name    string
		request string
		numa    string
		devices string
		code    int
		pinned  []string // handed to the plugin on success
		says    string   // in the error's details
	}{
		{"two keys", "gpu:2", "", "0000:03:00.0,0000:04:00.0", 0, []string{"0000:03:00.0", "0000:04:00.0"}, ""},
		{"order is kept", "gpu:2", "", "b,a", 0, []string{"b", "a"}, ""},
		{"with locality", "gpu:1", "1", "a", 0, []string{"a"}, ""},
		{"empty is not set", "gpu:1", "", "", 0, nil, ""},
		{"amount below the keys", "gpu:1", "", "a,b", protocol.CodeInvalidRequest, nil, ""},
		{"amount above the keys", "gpu:3", "", "a,b", protocol.CodeInvalidRequest, nil, ""},
		{"two items", "gpu:1,gpu-memory:1", "", "a,b", protocol.CodeInvalidRequest, nil, ""},
		{"duplicate key", "gpu:2", "", "a,a", protocol.CodeInvalidRequest, nil, ""},
		{"empty item", "gpu:2", "", "a,,b", protocol.CodeInvalidRequest, nil, ""},
		{"trailing comma", "gpu:1", "", "a,", protocol.CodeInvalidRequest, nil, ""},
		{"bad character", "gpu:1", "", "/dev/dri/card0", protocol.CodeInvalidRequest, nil, ""},
		{"key too long", "gpu:1", "", strings.Repeat("k", 65), protocol.CodeInvalidRequest, nil, ""},
		{"a foreign spec is still 4", "tty:1", "", "a,b", protocol.CodeSpecUnsupported, nil, ""},
		{"a bad amount is reported first", "gpu:01", "", "/", protocol.CodeInvalidRequest, nil, "CDI_REQUEST:"},
		{"bad locality is reported first", "gpu:1", "x", "/", protocol.CodeInvalidRequest, nil, "CDI_REQUEST_NUMA_LOCALITY"},
		{"the key is named", "gpu:1", "", "a/b", protocol.CodeInvalidRequest, nil, `CDI_REQUEST_DEVICES: invalid device key "a/b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls []*Call
			env := map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST_ID": "r", "CDI_REQUEST": tt.request,
				"CDI_REQUEST_NUMA_LOCALITY": tt.numa, "CDI_REQUEST_DEVICES": tt.devices}
			status, obj, out := run(t, env, strings.NewReader(gpuConf), fake{add: &AddResult{}, calls: &calls})
			code, _ := obj["code"].(float64)
			if int(code) != tt.code || (status == 0) != (tt.code == 0) {
				t.Fatalf("status %d, answer %s; want code %d", status, out, tt.code)
			}
			if d, _ := obj["details"].(string); !strings.Contains(d, tt.says) {
				t.Fatalf("details %q do not say %q", d, tt.says)
			}
			if tt.code != 0 {
				if len(calls) != 0 {
					t.Fatal("the plugin was called")
				}
				return
			}
			if len(calls) != 1 || !slices.Equal(calls[0].Pinned, tt.pinned) || (calls[0].Pinned == nil) != (tt.pinned == nil) {
				t.Fatalf("plugin got %q; want %q", calls[0].Pinned, tt.pinned)
			}
		})
	}
}

// TestPinnedSharedKeys: a plugin with SharedKeys gets a key named twice
// as named, each time one more share; the grammar and the amount still
// hold.
func TestPinnedSharedKeys(t *testing.T) {
	tests := []struct {
		name, request, devices string
		code                   int
		pinned                 []string
	}{
		{"a key twice", "gpu:3", "a,a,b", 0, []string{"a", "a", "b"}},
		{"the amount counts each naming", "gpu:2", "a,a,b", protocol.CodeInvalidRequest, nil},
		{"the grammar holds", "gpu:2", "a,,a", protocol.CodeInvalidRequest, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls []*Call
			env := map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST_ID": "r", "CDI_REQUEST": tt.request, "CDI_REQUEST_DEVICES": tt.devices}
			_, obj, out := run(t, env, strings.NewReader(gpuConf), fake{add: &AddResult{}, calls: &calls, shared: true})
			if code, _ := obj["code"].(float64); int(code) != tt.code {
				t.Fatalf("answer %s; want code %d", out, tt.code)
			}
			if tt.code == 0 && (len(calls) != 1 || !slices.Equal(calls[0].Pinned, tt.pinned)) {
				t.Fatalf("plugin got %v; want %q", calls, tt.pinned)
			}
		})
	}
}
