package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestUsage(t *testing.T) {
	tests := []struct {
		args   []string
		status int
		stdout string // a text stdout must contain
		stderr string // a text stderr must contain
	}{
		{nil, exitUsage, "", "Usage: cdi-kubelet-plugin device-plugin"},
		{[]string{"--help"}, exitOK, "-resource-prefix", ""},
		{[]string{"device-plugin", "--help"}, exitOK, "-kubelet-dir", ""},
		{[]string{"dra"}, exitUsage, "", `unknown mode "dra"`},
		{[]string{"device-plugin", "--nope"}, exitUsage, "", "flag provided but not defined: -nope"},
		{[]string{"device-plugin", "extra"}, exitUsage, "", `unexpected argument "extra"`},
		{[]string{"device-plugin", "--gc-interval", "0s"}, exitUsage, "", "--gc-interval must be positive"},
		{[]string{"device-plugin", "--gc-grace", "-1s"}, exitUsage, "", "--gc-grace must not be negative"},
		{[]string{"device-plugin", "--resource-prefix", "a/b"}, exitUsage, "", "must not contain /"},
		{[]string{"device-plugin", "--conf-dir", "/nonexistent"}, exitFailed, "", "no usable config under /nonexistent"},
		{[]string{"device-plugin", "--conf-dir", "/nonexistent", "--type", "gpu"}, exitFailed, "", `no usable config of type \"gpu\"`},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		e := env{getenv: func(string) string { return "" }, stdout: &out, stderr: &errOut}
		status := run(context.Background(), tt.args, e)
		if status != tt.status || !strings.Contains(out.String(), tt.stdout) || !strings.Contains(errOut.String(), tt.stderr) {
			t.Errorf("%q: status %d\nstdout: %s\nstderr: %s", tt.args, status, out.String(), errOut.String())
		}
	}
}
