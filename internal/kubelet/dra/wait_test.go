package dra

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/cdi-exec/plugins/test/kubelettest"
)

// Without a kubelet, the driver says so: the kubelet's root directory
// missing at start, then every WaitLog the registration socket the kubelet
// has not come to; once the kubelet registers it, it says so and stops.
func TestDriverWaitsForTheKubelet(t *testing.T) {
	n := ttyNode(t)
	if err := os.Remove(n.kubelet); err != nil {
		t.Fatal(err)
	}
	var log kubelettest.Buffer
	opt := n.options()
	opt.Log = slog.New(slog.NewTextHandler(&log, nil))
	opt.WaitLog = time.Millisecond
	in := n.start(opt)
	noDir := `msg="the kubelet's root directory is not there: its plugin directories are made, and the drivers wait for a kubelet to register the drivers" dir=` + n.kubelet
	if strings.Count(log.String(), noDir) != 1 {
		t.Errorf("no word of the missing kubelet directory %s:\n%s", n.kubelet, log.String())
	}
	waiting := `msg="the kubelet has not registered the driver yet: waiting for it" driver=` + ttyDriver + ` socket=` + in.regSocket(ttyDriver) +
		` expected="a running kubelet whose --root-dir is --kubelet-dir ` + n.kubelet + `, which finds the socket in ` + filepath.Join(n.kubelet, "plugins_registry") + `"`
	n.eventually("the driver to say it waits for the kubelet", func() error {
		if !strings.Contains(log.String(), waiting) {
			return errors.New("not yet")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := registerapi.NewRegistrationClient(n.conn(in.regSocket(ttyDriver))).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	registered := `msg="registered with the kubelet" driver=` + ttyDriver
	n.eventually("the driver to say it is registered", func() error {
		if !strings.Contains(log.String(), registered) {
			return errors.New("not yet")
		}
		return nil
	})
	before := strings.Count(log.String(), waiting)
	if err := in.shutdown(); err != nil {
		t.Fatal(err)
	}
	if after := strings.Count(log.String(), waiting); after != before {
		t.Errorf("%d more waiting lines after the registration:\n%s", after-before, log.String())
	}
}
