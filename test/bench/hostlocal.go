package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// hostLocalVersion is the CNI reference IPAM plugin measured beside ours: a
// one-exec-per-container plugin with a durable on-disk store, the closest
// thing the field has to a reference.
const hostLocalVersion = "v1.9.0"

// buildHostLocal installs host-local from the Go module proxy into work.
func buildHostLocal(work string) (string, error) {
	gobin := filepath.Join(work, "host-local-bin")
	cmd := exec.Command("go", "install", "-trimpath", "-ldflags", "-s -w",
		"github.com/containernetworking/plugins/plugins/ipam/host-local@"+hostLocalVersion)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOBIN="+gobin, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building host-local %s: %v\n%s", hostLocalVersion, err, out)
	}
	bin := filepath.Join(work, "host-local")
	return bin, install(filepath.Join(gobin, "host-local"), bin)
}

// hostLocalScenarios times host-local ADD (a fresh container id each run,
// released untimed) and DEL (of an id added untimed just before).
func hostLocalScenarios(work string) ([]scenario, error) {
	bin, err := buildHostLocal(work)
	if err != nil {
		return nil, err
	}
	state := filepath.Join(work, "state", "host-local")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	// host-local never enters the namespace, but the CNI library refuses the
	// plugin's own; any other path does.
	netns := filepath.Join(work, "netns")
	if err := os.WriteFile(netns, nil, 0o644); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"bench","ipam":{"type":"host-local","subnet":"10.77.0.0/16","dataDir":%q}}`, state)
	call := func(cmd, id string) proc {
		return proc{bin: bin, stdin: conf, env: []string{
			"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=" + id, "CNI_NETNS=" + netns,
			"CNI_IFNAME=eth0", "CNI_PATH=" + filepath.Dir(bin),
		}}
	}
	return []scenario{
		{name: "host-local " + hostLocalVersion + " ADD", state: state, each: func(i int) (proc, proc) {
			id := fmt.Sprintf("a%d", i)
			return call("ADD", id), call("DEL", id)
		}},
		{name: "host-local " + hostLocalVersion + " DEL", state: state,
			setup: func() error { _, err := timed(call("ADD", "d0")); return err },
			each: func(i int) (proc, proc) {
				return call("DEL", fmt.Sprintf("d%d", i)), call("ADD", fmt.Sprintf("d%d", i+1))
			}},
	}, nil
}
