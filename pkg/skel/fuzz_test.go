package skel

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/pkg/protocol"
)

// FuzzDispatcher drives the engine with random environment and stdin and
// checks the protocol's invariants: at most one JSON object on stdout with
// cdiVersion first, exit status 0 for VERSION and DEL and for successes, 1
// with a code for other failures, and no panic anywhere in the engine.
func FuzzDispatcher(f *testing.F) {
	f.Add("ADD", "0.0.1", "gpu:1", "1234", "", gpuConf)
	f.Add("DEL", "0.999", "", "x-", "0", "{")
	f.Add("INFO", "", "", "", "", `{"cdiVersion":"0.0.2","name":"","type":"gpu","plugin":"drm"}`)
	f.Add("VERSION", "x", "x", "x", "x", "x")
	f.Add("add", "0.0.2", "gpu:1,gpu-memory:2048Mi", "3456", "1,0", gpuConf)
	f.Add("GC", "0.0.2", "", "", "", gpuConf)
	f.Fuzz(func(t *testing.T, cmd, version, request, id, numa, stdin string) {
		env := map[string]string{
			"CDI_COMMAND": cmd, "CDI_VERSION": version, "CDI_REQUEST": request,
			"CDI_REQUEST_ID": id, "CDI_REQUEST_NUMA_LOCALITY": numa,
		}
		var out, errOut bytes.Buffer
		d := Dispatcher{Getenv: func(k string) string { return env[k] }, Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut}
		p := fake{info: map[string]int{"gpu": 1}, add: &AddResult{Devices: []string{"/dev/x"}}}
		status := d.Run(context.Background(), About{New: func(c *Call) (Plugin, error) { return p, c.Config.DecodeArgs(&struct{}{}) }})

		// ASCII case only: "verſion" is not VERSION.
		upper := strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' {
				return r - 'a' + 'A'
			}
			return r
		}, cmd)
		if out.Len() == 0 {
			if status != 0 {
				t.Fatalf("status %d with no output", status)
			}
			return
		}
		dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			t.Fatalf("stdout not JSON: %v\n%s", err, out.String())
		}
		if dec.More() {
			t.Fatalf("more than one JSON value:\n%s", out.String())
		}
		if !strings.HasPrefix(out.String(), "{\n  \"cdiVersion\": ") {
			t.Fatalf("cdiVersion not first:\n%s", out.String())
		}
		if v, _ := obj["cdiVersion"].(string); !protocol.Supported(v) {
			t.Fatalf("answered in unsupported version %q", v)
		}
		code, isErr := obj["code"].(float64)
		switch {
		case upper == protocol.CmdVersion || upper == protocol.CmdDel:
			if status != 0 {
				t.Fatalf("%s exited %d", upper, status)
			}
		case isErr && status != 1, !isErr && status != 0:
			t.Fatalf("status %d for %v", status, obj)
		}
		if isErr && code == protocol.CodeInternal {
			t.Fatalf("engine failed internally: %v\n%s", obj, errOut.String())
		}
	})
}
