package main

import (
	"context"
	"strings"

	"github.com/cdi-exec/plugins/internal/kubelet/bridge"
	"github.com/cdi-exec/plugins/internal/kubelet/modelock"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// lockDevicePlugin takes the device-plugin mode's lock on the bridge's
// resource types in the plugins' state directory, so that the dra mode
// cannot serve them at the same time (internal/kubelet/modelock).
func lockDevicePlugin(ctx context.Context, e env, b *bridge.Bridge, prefix string) (*modelock.Lock, error) {
	var types []string
	for _, r := range b.Resources() {
		types = append(types, strings.TrimPrefix(r, prefix+"/"))
	}
	penv, _ := protocol.ReadEnv(e.getenv) // a bad CDI_LOCK_TIMEOUT is the plugins' to report
	return modelock.Acquire(ctx, penv.StateDir, modelock.DevicePlugin, types)
}
